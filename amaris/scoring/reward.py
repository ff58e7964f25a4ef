"""Where a reward is made: ``POST /score`` from its checked body to the answer.

Read top to bottom, :func:`score_rollout` is the whole hot path:

1. check the request's sizes (nothing is judged, created or stored before);
2. admit the rollout's step (:meth:`StepCoordinator.admission`: the step bounds; without
   ``metadata.current_step``, the step open now);
3. check the rollout id (:class:`RolloutIds`: the same id with other content is a conflict);
4. resolve the scope (global, or the input's in ``per_instance`` mode) and its rubric;
5. pre-check: a degenerate reply (:func:`degenerate`: empty, punctuation only, a bare
   reasoning opener, the prompt echoed, a reply a learned rule of the judge canaries
   matches) gets ``scoring.precheck.floor``, unjudged;
6. judge: a verdict per criterion (:meth:`Scorer.judge`: rule criteria computed by amaris,
   the others asked of the judge, in one call or none; sizes, context budget, cache);
7. aggregate the verdicts into one reward (:func:`aggregate`, by amaris, not the LLM) and a
   reward per objective (:func:`reward_vector`), and with ``include_turns`` a trajectory's
   reward per assistant turn (:func:`turn_rewards`), or answer ``unscored`` by
   ``scoring.on_failure`` (a reward is never made up);
8. record the rollout, its verdicts and rubric version in the rollout log, before answering
   (``late`` in the answer when its step was completed already: logged, not analysed);
9. in ``sync`` mode, wait for the step's update and score again under the new rubric;
10. count the answer in the scorer's counters (``/healthz``): only now, so a rollout the
    rollout log refused (answered 503) counts as ``unstored``, never as scored or unscored.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from amaris.memory.records import RolloutRecord
from amaris.memory.storage_health import StorageUnavailableError
from amaris.models import ScoreRequest, ScoreResponse
from amaris.request_context import request_id_var
from amaris.rubric.aggregate import aggregate
from amaris.rubric.model import RubricVersion
from amaris.rubric.reward_vector import floor_vector, reward_vector
from amaris.rubric.scopes import ScopeResolver
from amaris.scoring.group import leave_group
from amaris.scoring.rollout_ids import RolloutIds
from amaris.scoring.scorer import Scorer, rollout_chars
from amaris.scoring.turn_rewards import turn_rewards
from amaris.steps.coordinator import StepCoordinator
from amaris.text.offload import OFF_LOOP_CHARS, off_loop_above
from amaris.trust.precheck import degenerate


async def score_rollout(
    request: ScoreRequest,
    *,
    scopes: ScopeResolver,
    scorer: Scorer,
    coordinator: StepCoordinator,
    ids: RolloutIds,
    sync: bool,
) -> ScoreResponse:
    """Check, admit the rollout's step, judge, aggregate, log durably (before answering),
    and in sync mode wait for the step's update and score again under its rubric; then
    count the answer (:func:`held_counts`), or ``unstored`` when a durable write failed.

    Raises:
        OversizeError: a free-text field is over ``scoring.max_field_chars``.
        StepRefusedError: the step is refused.
        RolloutConflictError: the rollout id is in the step with other content.
        RuleInputError: a rule criterion needs a reference answer the rollout lacks.
        OverloadedError: ``scoring.max_pending`` judge calls are pending already.
        StorageUnavailableError: the rollout log (or the step registry) refused the write.
    """
    scorer.check(request)
    if "current_step" not in request.metadata.model_fields_set:
        # No step given (no metadata): the step open now, not step 0.
        step = await coordinator.open_step()
        metadata = request.metadata.model_copy(update={"current_step": step})
        request = request.model_copy(update={"metadata": metadata})
    step = request.metadata.current_step
    async with coordinator.admission(step):
        claim = await ids.claim(step, request.rollout)
        stored = False
        counts: Counter[str] = Counter()
        try:
            scope = scopes.scope_of(request.rollout.input)
            rubric = await scopes.rubric(scope)
            result = await reward_of(scorer, request, rubric, counts=counts)
            leave_group()  # judged: a sync-mode rescore is judged on its own
            try:
                late = await coordinator.record(step, log_record(request, result, scope))
            except StorageUnavailableError:
                scorer.counters["unstored"] += 1
                raise
            if late:
                result = result.model_copy(update={"late": True})
            stored = True
        finally:
            ids.release(claim, stored)
    if sync:
        await coordinator.wait(step)
        updated = await scopes.rubric(scope)
        if updated.version != rubric.version:
            # The answer is the new rubric's: its counts, not the first judgement's.
            counts = Counter()
            result = await reward_of(scorer, request, updated, counts=counts)
    _count(scorer, counts)
    if not request.include_breakdown:
        result = result.model_copy(update={"breakdown": None})
    return result


_held: ContextVar[list[Counter[str]] | None] = ContextVar("amaris_held_counts", default=None)
"""The counts of the answers of the batch being scored (:func:`held_counts`), if any."""


def _count(scorer: Scorer, counts: Counter[str]) -> None:
    held = _held.get()
    if held is None:
        scorer.counters.update(counts)
    else:
        held.append(counts)


@contextmanager
def held_counts(scorer: Scorer) -> Iterator[None]:
    """Within: the counts of the rollouts :func:`score_rollout` answers (the tasks started
    inside too) are held, and added to ``scorer.counters`` only if the block ends without
    an error: a batch refused as a whole (a 503 when one item's write failed) counts none
    of its items, the stored ones included."""
    held: list[Counter[str]] = []
    token = _held.set(held)
    try:
        yield
    finally:
        _held.reset(token)
    for counts in held:
        scorer.counters.update(counts)


async def reward_of(
    scorer: Scorer,
    request: ScoreRequest,
    rubric: RubricVersion | None = None,
    *,
    counts: Counter[str] | None = None,
) -> ScoreResponse:
    """The answer for one rollout judged against ``rubric`` (default: the global one in
    force): the aggregated reward, or ``unscored`` with the judge's failure.

    The breakdown is always filled in (the rollout log keeps it; empty for a degenerate
    reply, which no criterion judged); the API drops it unless asked. ``rewards``, the
    reward per objective, is there whenever the rollout is scored; ``turns``, a
    trajectory's reward per turn, when scored and asked (``include_turns``). Stores nothing.
    ``counts``: where the answer's counts go (:meth:`Scorer.judge`); by default the
    scorer's counters, at once.
    """
    precheck = scorer.settings.precheck
    messages = request.rollout.messages if request.include_turns else None
    if precheck.enabled:
        rollout = request.rollout
        rules = scorer.learned_rules
        # Linear, yet costly on a long rollout: its pre-check runs in a thread.
        found = await off_loop_above(
            rollout_chars(request),
            OFF_LOOP_CHARS,
            degenerate,
            rollout.output,
            rollout.input,
            rollout.supplemental_context,
            # Only rules in force need the reply normalised whole (degenerate's docstring).
            rules.match if rules is not None and rules.in_force() else None,
        )
        if found is not None:
            # A reward, not a failure: the trainer should push the policy away from it.
            (scorer.counters if counts is None else counts)["degenerate"] += 1
            used = rubric or scorer.rubric()
            return ScoreResponse(
                score=precheck.floor,
                rubric_version=used.version,
                status="scored",
                rollout_id=rollout.id,
                reason=found.reason(),
                breakdown=[],
                rewards=floor_vector(used, precheck.floor),
                turns=None if messages is None else turn_rewards(messages, precheck.floor),
            )
    judgement = await scorer.judge(request, rubric, counts=counts)
    if judgement.breakdown is None:
        policy = scorer.settings
        return ScoreResponse(
            score=policy.neutral_score if policy.on_failure == "neutral" else None,
            status="unscored",
            reason=judgement.failure,
            rubric_version=judgement.rubric_version,
            rollout_id=request.rollout.id,
            truncated=judgement.truncated,
        )
    verdicts = judgement.breakdown
    score = aggregate([c.weight for c in verdicts], [c.verdict for c in verdicts])
    return ScoreResponse(
        score=score,
        status="scored",
        cached=judgement.cached,
        judge=judgement.judge,
        judge_mode=judgement.judge_mode,
        breakdown=list(verdicts),
        rewards=reward_vector(verdicts),
        rubric_version=judgement.rubric_version,
        rollout_id=request.rollout.id,
        truncated=judgement.truncated,
        turns=None
        if messages is None
        else turn_rewards(messages, score, verdicts, judgement.turns),
    )


def log_record(request: ScoreRequest, result: ScoreResponse, scope: str) -> RolloutRecord:
    """What the rollout log keeps of a scored rollout (every field of the request's models,
    defaults included, as JSON)."""
    return RolloutRecord.model_validate(
        {
            "scope": scope,
            "rollout": request.rollout.model_dump(mode="json"),
            "metadata": request.metadata.model_dump(mode="json"),
            "score": result.score if result.status == "scored" else None,
            "status": result.status,
            "reason": result.reason,
            "rubric_version": result.rubric_version,
            "verdicts": [c.model_dump(mode="json") for c in result.breakdown or []],
            "request_id": request_id_var.get(),
        }
    )
