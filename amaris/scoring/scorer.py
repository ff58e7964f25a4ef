"""The judge of the hot path: one rollout's verdicts on every criterion of a rubric.

Sizes, context budget, the cache of identical requests and the merging of identical
in-flight ones, the judge call(s): what :mod:`amaris.scoring.reward` asks for between
resolving the rubric and aggregating the reward (what the judge is asked and must
answer: :mod:`amaris.scoring.judge_protocol`)."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from collections import Counter, OrderedDict

from amaris.agents.prompts import check_sections
from amaris.llm.budget import cut_middle
from amaris.llm.gateway import (
    LLMContextOverflowError,
    LLMGateway,
    LLMOutputError,
    LLMResponseTooLargeError,
    LLMTruncatedError,
    LLMUnavailableError,
)
from amaris.logs import loggable
from amaris.models import ScoreRequest
from amaris.rubric.model import RubricVersion
from amaris.rubric.store import RubricStore
from amaris.scoring.group import GroupJudge, leave_group, take_seat
from amaris.scoring.judge_calls import JudgeCalls
from amaris.scoring.judge_fit import ContextFit, rubric_example, rubric_schema
from amaris.scoring.judge_protocol import (
    JudgeVerdicts,
    Reply,
    TrajectoryVerdicts,
    TurnVerdict,
    check_ids,
    judge_messages,
    known_verdicts,
)
from amaris.scoring.judgement import Judged, Judgement, JudgeName, merge_verdicts, merged_truncated
from amaris.scoring.refusals import OverloadedError, OversizeError
from amaris.scoring.rules import check_references, rule_results
from amaris.scoring.trajectory_view import TrajectoryView, fit_fields
from amaris.scoring.verdicts import (
    LogprobsError,
    distributions_off_loop,
    expected_value,
    margin,
)
from amaris.settings import AgentName, ScoringSettings, template_agent
from amaris.text.offload import OFF_LOOP_CHARS, off_loop_above
from amaris.text_fields import storable
from amaris.trust.learned_rules import LearnedRules

log = logging.getLogger("amaris.scoring.scorer")

_FIELDS = ("input", "output", "supplemental_context")
_JUDGED = frozenset({*(f"rollout.{name}" for name in _FIELDS), "rollout.messages"})


class Scorer:
    """Scores rollouts; caches identical requests and merges identical in-flight ones."""

    def __init__(
        self,
        settings: ScoringSettings,
        gateway: LLMGateway,
        store: RubricStore,
        prompt: str,
        *,
        samples: int = 1,
        logprobs: bool = False,
        account: str | None = None,
        learned_rules: LearnedRules | None = None,
        agent: AgentName = "scorer",
        name: JudgeName = "strong",
    ) -> None:
        self._settings = settings
        self._name = name
        """What its judgements say decided them (``cheap``: the cascade's first judge)."""
        self.learned_rules = learned_rules
        """The pre-check's learned rules (judge canaries), matched before the judge."""
        self._calls = JudgeCalls(agent, account, samples, logprobs)
        self._gateway = gateway
        self._store = store
        # A malformed trajectory section fails here, when the scorer is built.
        check_sections(template_agent(agent), prompt)
        self._prompt = prompt
        self._cache: OrderedDict[str, Judged] = OrderedDict()
        self._inflight: dict[str, asyncio.Future[Judged]] = {}
        self._fit = ContextFit(gateway, agent, prompt)
        self.counters: Counter[str] = Counter()
        """What ``/healthz`` shows. Per rollout answered (on the hot path: once it is stored
        in the rollout log, :func:`~amaris.scoring.reward.score_rollout`), exactly one of
        ``scored``, ``cached``, ``degenerate`` (given the pre-check's floor) and
        ``unscored``; with it ``unscored.<reason kind>``, ``rule_only`` (scored by rule
        criteria alone, no judge call) and ``truncated.<cause>`` (``max_field_chars``,
        ``context_window``). Refusals, at once: ``overloaded`` (``scoring.max_pending``)
        and ``unstored`` (its durable write failed: answered 503, judged but not counted
        above). Judge replies, stored or not: ``logprobs_used`` / ``logprobs_missing``."""
        # listwise mode: the judge of a batch's groups (amaris/scoring/group.py).
        self.groups = (
            GroupJudge(settings, gateway, self.counters, self._calls)
            if settings.group_mode == "listwise"
            else None
        )

    @property
    def pending(self) -> int:
        """Distinct judge calls queued or in flight."""
        return len(self._inflight)

    def check(self, request: ScoreRequest, rubric: RubricVersion | None = None) -> None:
        """Refuse a request with a free-text field over ``scoring.max_field_chars``, or
        without the reference answer a rule criterion of ``rubric`` (by default the global
        rubric in force) needs.

        Every free-text field counts (:meth:`ScoreRequest.text_sizes`: metadata included);
        with ``scoring.oversize: truncate`` the judged fields (a trajectory's messages) are
        cut instead (by :meth:`prepare`). Called before anything is judged or stored.

        Raises:
            OversizeError: the first field over the limit.
            RuleInputError: a rule criterion of the rubric in force needs a reference answer
                (``rollout.supplemental_context``) the rollout does not give.
        """
        limit = self._settings.max_field_chars
        cut = self._settings.oversize == "truncate"
        for field, size in request.text_sizes():
            if size > limit and not (cut and field in _JUDGED):
                # ``<section>.<name>`` (the name may hold dots: a metadata key of the body).
                raise OversizeError(tuple(field.split(".", 1)), size, limit)
        check_references((rubric or self._store.current()).criteria, request.rollout)

    def prepare(self, request: ScoreRequest) -> tuple[dict[str, str], list[str]]:
        """Apply the size limit to the judged fields: a trajectory's two texts together
        (cut by its parts, :mod:`amaris.scoring.trajectory_view`), each other field alone.

        Returns:
            The judged fields and the names of the fields that were truncated.

        Raises:
            OversizeError: a field is over the limit and ``scoring.oversize`` is reject.
        """
        limit = self._settings.max_field_chars
        reject = self._settings.oversize == "reject"
        view = TrajectoryView.of(request.rollout)
        fields = {name: getattr(request.rollout, name) or "" for name in _FIELDS}
        truncated: list[str] = []
        # A trajectory's two texts are one field of the request, ``messages``.
        alone = _FIELDS if view is None else ("supplemental_context",)
        if view is not None and len(fields["input"]) + len(fields["output"]) > limit:
            size = len(fields["input"]) + len(fields["output"])
            if reject:
                raise OversizeError(("rollout", "messages"), size, limit)
            texts = {"input": fields["input"], "output": fields["output"]}
            fields.update(fit_fields(view, texts, limit)[0])
            truncated.append("rollout.messages")
        for name in alone:
            if len(fields[name]) > limit:
                if reject:
                    raise OversizeError(("rollout", name), len(fields[name]), limit)
                fields[name] = cut_middle(fields[name], limit)
                truncated.append(f"rollout.{name}")
        return fields, truncated

    def rubric(self) -> RubricVersion:
        """The global rubric version in force."""
        return self._store.current()

    @property
    def settings(self) -> ScoringSettings:
        """``scoring:``: limits, cache and the policy for an unscored rollout."""
        return self._settings

    async def judge(
        self,
        request: ScoreRequest,
        rubric: RubricVersion | None = None,
        *,
        counts: Counter[str] | None = None,
    ) -> Judgement:
        """The verdicts on one rollout against ``rubric`` (default: the global one in force).

        Never fabricates: a judge failure is a :class:`Judgement` with a ``failure`` and no
        breakdown. Call :meth:`check` first: this checks only the judged fields.

        ``counts``: where the judgement's own counts go (``scored``, ``cached``,
        ``unscored.<kind>``, ``truncated.<cause>``...), for the caller to add to
        :attr:`counters` once its answer is acknowledged; by default :attr:`counters`,
        at once. ``overloaded`` and the judge replies' counts go to :attr:`counters` always.

        Raises:
            OverloadedError: ``scoring.max_pending`` judge calls are pending already.
        """
        tally = self.counters if counts is None else counts
        view = TrajectoryView.of(request.rollout)
        whole, truncated = self.prepare(request)
        if truncated:
            tally["truncated.max_field_chars"] += 1
        rubric = rubric or self._store.current()
        # On the whole reply, never the cut one: a rule needs no context window. The rules of
        # a long rollout run in a thread (RE2 releases the interpreter lock; a regex whose
        # automaton is large, or answer extraction, is costly on a long reply).
        rules = await off_loop_above(
            rollout_chars(request) if any(c.rule is not None for c in rubric.criteria) else 0,
            OFF_LOOP_CHARS,
            rule_results,
            rubric.criteria,
            request.rollout,
        )
        if not rubric.judged:
            # Every criterion is a rule: nothing to ask the judge.
            tally["scored"] += 1
            tally["rule_only"] += 1
            return Judgement(rubric.version, truncated, merge_verdicts(rubric, rules, ()))
        fields, cut = await self._fit.within_budget(rubric, whole, view)
        if cut:
            tally["truncated.context_window"] += 1
        key = self._key(rubric, fields, view)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            tally["cached"] += 1
            return Judgement(
                rubric.version,
                merged_truncated(truncated, cut, view),
                merge_verdicts(rubric, rules, cached.breakdown),
                cached=True,
                turns=cached.turns,
                judge=self._name,
                confidence=cached.confidence,
                listwise=cached.listwise,
            )
        limit = self._settings.max_pending
        if key not in self._inflight and limit is not None and len(self._inflight) >= limit:
            self.counters["overloaded"] += 1
            raise OverloadedError(f"{len(self._inflight)} judge calls pending (max_pending)")
        try:
            # asyncio.timeout, not wait_for: no extra task per request on the hot path.
            async with asyncio.timeout(self._settings.timeout_seconds):
                try:
                    judged = await self._judge_once(
                        key, rubric, fields, request.metadata.current_step, view
                    )
                except LLMContextOverflowError:
                    # The server counted more tokens than estimated; the gateway has learnt
                    # by how much (its budget shrank): cut to the new budget, judge once more.
                    refitted, recut = await self._fit.within_budget(rubric, whole, view)
                    if refitted == fields:
                        raise
                    if not cut:
                        tally["truncated.context_window"] += 1
                    cut = recut
                    key, fields = self._key(rubric, refitted, view), refitted
                    judged = await self._judge_once(
                        key, rubric, fields, request.metadata.current_step, view
                    )
        except (LLMUnavailableError, LLMOutputError, LogprobsError, TimeoutError) as exc:
            if isinstance(exc, TimeoutError):
                kind, exc = (
                    "judge_timeout",
                    TimeoutError(
                        "no verdict within scoring.timeout_seconds "
                        f"({self._settings.timeout_seconds})"
                    ),
                )
            elif isinstance(exc, LLMContextOverflowError):
                kind = "judge_context_overflow"
            elif isinstance(exc, LogprobsError):
                kind = "judge_invalid_logprobs"
            elif isinstance(exc, LLMResponseTooLargeError):
                kind = "judge_oversize"
            elif isinstance(exc, LLMUnavailableError):
                kind = "judge_unavailable"
            elif isinstance(exc, LLMTruncatedError):
                kind = "judge_truncated"
            else:
                kind = "judge_invalid"
            tally["unscored"] += 1
            tally[f"unscored.{kind}"] += 1
            # The error may quote the judge's reply (or an endpoint's error body).
            failure = storable(f"{kind}: {exc}")
            log.warning("unscored rollout %s: %s", loggable(request.rollout.id), failure)
            return Judgement(
                rubric.version, merged_truncated(truncated, cut, view), failure=failure
            )
        tally["scored"] += 1
        return Judgement(
            rubric.version,
            merged_truncated(truncated, cut, view),
            merge_verdicts(rubric, rules, judged.breakdown),
            turns=judged.turns,
            judge=self._name,
            confidence=judged.confidence,
            listwise=judged.listwise,
        )

    async def _judge_once(
        self,
        key: str,
        rubric: RubricVersion,
        fields: dict[str, str],
        step: int,
        view: TrajectoryView | None,
    ) -> Judged:
        # GRPO groups often repeat a completion: concurrent identical requests share one call.
        pending = self._inflight.get(key)
        if pending is not None:
            leave_group()  # judged by the identical rollout's call
            return await asyncio.shield(pending)
        future: asyncio.Future[Judged] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            own = functools.partial(self._judge, rubric, fields, step, view)
            seat = take_seat(self.groups, view is None)
            judged = await (own() if seat is None else seat.judge(rubric, fields, step, own))
        except BaseException as exc:
            # Waiters sharing this call must not inherit its cancellation (a timeout of the
            # first request): they get an ordinary judge failure instead.
            shared = (
                exc
                if isinstance(exc, Exception)
                else LLMUnavailableError("the shared judge call was cancelled")
            )
            future.set_exception(shared)
            future.exception()  # mark retrieved: waiters, if any, re-raise it themselves
            raise
        finally:
            self._inflight.pop(key, None)
        future.set_result(judged)
        if self._settings.cache_size > 0:
            self._cache[key] = judged
            while len(self._cache) > self._settings.cache_size:
                self._cache.popitem(last=False)
        return judged

    async def _judge(
        self,
        rubric: RubricVersion,
        fields: dict[str, str],
        step: int,
        view: TrajectoryView | None,
    ) -> Judged:
        # JSON of the rollout: in a thread for a long one.
        turns = None if view is None else view.turns
        messages = await off_loop_above(
            _chars(fields), OFF_LOOP_CHARS, judge_messages, self._prompt, rubric, fields, turns
        )
        trajectory = view is not None
        reply: type[Reply] = TrajectoryVerdicts if trajectory else JudgeVerdicts
        # All k must succeed: the rewards of a group must come from the same estimator.
        call = functools.partial(
            self._gateway.structured_completion,
            self._calls.agent,
            messages,
            reply,
            step=step,
            check=check_ids(rubric),
            json_schema=rubric_schema(rubric, trajectory),
            account=self._calls.account,
            example=rubric_example(rubric, trajectory),
        )
        replies = await self._calls.replies(call)
        samples: dict[str, list[float]] = {c.id: [] for c in rubric.judged}
        margins: dict[str, list[float]] = {c.id: [] for c in rubric.judged}
        from_logprobs = 0
        for result, completion in replies:
            values: list[float] = [v.score for v in result.verdicts]
            sure: list[float] = []
            if self._calls.logprobs:
                found = (
                    await distributions_off_loop(completion.logprobs, completion.content, values)
                    if completion.logprobs
                    else None
                )
                self.counters["logprobs_missing" if found is None else "logprobs_used"] += 1
                if found is not None:
                    values, from_logprobs = [expected_value(d) for d in found], from_logprobs + 1
                    sure = [margin(d) for d in found]
            for i, (verdict, value) in enumerate(zip(result.verdicts, values, strict=True)):
                if verdict.id in samples:  # a verdict on an id of the judge's own: ignored
                    samples[verdict.id].append(value)
                    margins[verdict.id].extend(sure[i : i + 1])
        first = known_verdicts(replies[0][0], rubric)
        reasons = {v.id: v.reason for v in first}
        # The first reply's attributions, as its reasons: a turn is not averaged.
        attributed = {v.id: tuple(v.turns) for v in first if isinstance(v, TurnVerdict)}
        return Judged.of_samples(
            rubric,
            len(replies),
            samples,
            reasons,
            from_logprobs if self._calls.logprobs else None,
            margins=margins,
            turns=attributed,
        )

    @staticmethod
    def _key(rubric: RubricVersion, fields: dict[str, str], view: TrajectoryView | None) -> str:
        digest = hashlib.sha256()
        digest.update(f"{rubric.scope}\x00{rubric.version}".encode())
        for name in _FIELDS:
            encoded = fields[name].encode("utf-8", "surrogatepass")
            digest.update(len(encoded).to_bytes(8, "big") + encoded)
        if view is not None:
            # A trajectory is asked for turns, of these assistant messages.
            digest.update(b"\x00turns" + ",".join(map(str, view.turns)).encode())
        return digest.hexdigest()


def _chars(fields: dict[str, str]) -> int:
    return sum(len(value) for value in fields.values())


def rollout_chars(request: ScoreRequest) -> int:
    """The characters of the rollout's text fields together (what its text work reads)."""
    rollout = request.rollout
    return len(rollout.output) + len(rollout.input) + len(rollout.supplemental_context or "")
