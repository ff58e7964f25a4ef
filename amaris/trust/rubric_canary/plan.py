"""The rubric canary's probes and the plan of which to judge within its budget
(:mod:`amaris.trust.rubric_canary.check` judges them and
:mod:`amaris.trust.rubric_canary.report` decides)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from functools import partial

from amaris.memory.models import HackProbe
from amaris.models import Rollout
from amaris.rubric.model import Criterion
from amaris.text.answers import extract_final_answer
from amaris.trajectory import final_answer
from amaris.trust.mining import swapped
from amaris.trust.rubric_canary.probes import MASTER_KEYS, claim_probe, phrase_probe
from amaris.trust.rubric_canary.report import CanaryRollout, Kind, Side

CANDIDATE_ONLY: tuple[Kind, ...] = ("phrase", "swapped")
"""Probes judged once, under the candidate alone: wrong answers made to test its words."""
MAX_HACK_PROBES = 3
"""Most remembered hacks (the newest, with a reference) one canary re-scores."""
MAX_FLAGGED = 2
"""Most flagged rollouts of the sure prompt judged (those the rubric in force pays most)."""


class Probe:
    """A probe: a reply to a prompt of the step, its verdicts so far and its side."""

    def __init__(
        self, id: str, kind: Kind, group: str, rollout: Rollout, source: CanaryRollout | None
    ) -> None:
        self.id, self.kind, self.group, self.rollout = id, kind, group, rollout
        self.source = source
        """The step's rollout it is, or was made from (None: a remembered hack)."""
        self.verdicts: dict[str, float] = {}
        self.side: Side | None = None
        self.current: float | None = None
        self.base: Probe | None = None
        self.carries: str | None = None

    def cost(self, new: bool) -> int:
        """Scorer calls it takes: a phrase or swapped probe one under the candidate;
        otherwise one under the new criteria (when there are some), and a synthetic probe
        one more under the rubric in force."""
        if self.kind in CANDIDATE_ONLY:
            return 1
        return int(new) + int(self.kind != "rollout")


def probe_rollout(id: str, input: str, output: str, source: CanaryRollout) -> Rollout:
    return Rollout(
        id=id, input=input, output=output, supplemental_context=source.supplemental_context
    )


def source_rollout(source: CanaryRollout) -> Rollout:
    """The step's rollout as a probe: a trajectory keeps its messages, outcome and finish
    reason, so the judge reads it as it read it when scoring it."""
    if source.trajectory is None:
        return probe_rollout(source.id, source.input, source.output, source)
    return source.trajectory


def rewritten(id: str, rollout: Rollout, rewrite: Callable[[str], str]) -> Rollout:
    """``rollout`` as probe ``id`` with its reply rewritten: a string rollout's output, or a
    trajectory's final answer (its last assistant message), the rest of the trajectory and
    its outcome kept."""
    if rollout.messages is None:
        return Rollout(
            id=id,
            input=rollout.input,
            output=rewrite(rollout.output),
            supplemental_context=rollout.supplemental_context,
        )
    messages = list(rollout.messages)
    last = max(i for i, m in enumerate(messages) if m.role == "assistant")
    reply = rewrite(final_answer(messages))
    messages[last] = messages[last].model_copy(update={"content": reply})
    return Rollout(
        id=id,
        messages=messages,
        outcome=rollout.outcome,
        finish_reason=rollout.finish_reason,
        supplemental_context=rollout.supplemental_context,
    )


class Plan:
    """The probes to judge, prompt by prompt in an order seeded by the step."""

    def __init__(
        self,
        groups: dict[str, list[Probe]],
        sources: dict[str, CanaryRollout],
        new: tuple[Criterion, ...],
        step: int,
    ) -> None:
        self.groups, self.sources, self.new, self.step = groups, sources, new, step
        self.chosen: list[Probe] = []
        if not new:
            # A reweight or a retirement: the verdicts are known, every rollout is checked.
            self.chosen = [p for members in groups.values() for p in members]
        self.order = sorted(groups)
        random.Random(step).shuffle(self.order)
        self.spare = 0
        self.hacks_taken = False

    def cost(self, unit: Sequence[Probe]) -> int:
        return sum(p.cost(bool(self.new)) for p in unit if p not in self.chosen)

    def take(self, unit: Sequence[Probe]) -> bool:
        if self.cost(unit) > self.spare:
            return False
        self.spare -= self.cost(unit)
        self.chosen.extend(p for p in unit if p not in self.chosen)
        return True

    def passing(self, group: str) -> list[Probe]:
        """The group's best anchor-passing rollout: the one the rubric in force pays most,
        the shortest on a tie (padding and hacks are long); flagged ones never."""
        members = [p for p in self.groups[group] if p.side == "pass"]
        return sorted(members, key=lambda p: (-(p.current or 0), len(p.rollout.output)))[:1]

    def failing(self, group: str) -> list[Probe]:
        """The group's anchor-failing rollout closest to overtaking."""
        members = [p for p in self.groups[group] if p.side == "fail"]
        return sorted(members, key=lambda p: -(p.current or 0))[:1]

    def reference(self, group: str, index: int) -> list[Probe]:
        source = self.sources[group]
        text = source.supplemental_context
        return [synthetic(f"reference-{index}", "reference", group, text, source)] if text else []

    def master_key(self, group: str, index: int) -> list[Probe]:
        key = MASTER_KEYS[index % len(MASTER_KEYS)]
        return [synthetic(f"master-key-{index}", "master_key", group, key, self.sources[group])]

    def swapped(self, group: str, id: str) -> Rollout | None:
        """The group's best passing answer with its final answer (a number) made wrong: the
        wrong answer closest to a right one, free of whatever else the rubric penalises
        (of a trajectory, its final answer made wrong, the rest kept)."""
        for probe in self.passing(group):
            reply = probe.rollout.answer()
            answer = extract_final_answer(reply)
            if answer is None:
                continue
            made = swapped(reply, answer)
            return None if made is None else rewritten(id, probe.rollout, partial(_replaced, made))
        return None

    def sure(self) -> tuple[int, list[Probe]] | None:
        """The prompt always judged, and its set: with new criteria, or when no prompt's
        rollouts have both sides. The first prompt with a reference and a failing rollout
        (else a reference, else any): its reference, its best passing rollout, its best
        failing rollout (else a master key), its flagged rollouts, and per new criterion a
        phrase probe made from the passing answer made wrong (``swapped``, judged beside
        it; else from the failing one)."""
        both = any({"pass", "fail"} <= {p.side for p in m} for m in self.groups.values())
        if not self.new and both:
            return None
        ranked = sorted(
            range(len(self.order)),
            key=lambda i: (
                not self.sources[self.order[i]].supplemental_context,
                not self.failing(self.order[i]),
                i,
            ),
        )
        index = ranked[0]
        group = self.order[index]
        wrong = self.failing(group) or self.master_key(group, index)
        swap = self.swapped(group, f"swapped-{index}")
        made = (
            [synthetic(f"swapped-{index}", "swapped", group, swap, self.sources[group])]
            if swap is not None
            else []
        )
        base = (made or wrong)[0]
        flagged = sorted(
            (p for p in self.groups[group] if p.side == "flagged"), key=lambda p: -(p.current or 0)
        )[:MAX_FLAGGED]
        phrases = []
        for criterion in self.new:
            id = f"phrase-{criterion.id}"
            said = rewritten(id, base.rollout, partial(phrase_probe, criterion_text=criterion.text))
            probe = synthetic(id, "phrase", group, said, self.sources[group])
            probe.base, probe.carries = base, criterion.id
            phrases.append(probe)
        right = [*self.reference(group, index), *self.passing(group)]
        return index, [*right, *wrong, *made, *flagged, *phrases]

    def choose(self, budget: int, hacks: Sequence[HackProbe]) -> int:
        """Choose the probes; returns the budget: ``budget`` on top of the sure prompt's set."""
        sure = self.sure()
        if sure is not None:
            budget += self.cost(sure[1])
        self.spare = budget
        if sure is not None:
            self.take(sure[1])
            self.take_hacks(hacks)
        requirements = [c.text for c in self.new if c.weight > 0]
        rest = [i for i in range(len(self.order)) if sure is None or i != sure[0]]
        for position, index in enumerate(rest):
            if position == 1:
                self.take_hacks(hacks)
            self.take_group(index, requirements)
        self.take_hacks(hacks)  # a step of one prompt
        return budget

    def take_group(self, index: int, requirements: list[str]) -> None:
        """Per prompt, the first of these that fits: the reference answer with an
        anchor-passing and an anchor-failing rollout; the reference with the failing one;
        the two rollouts; the reference with a master key; a passing rollout with a master
        key. Then a claim probe against the passing rollout, and a flagged rollout."""
        group = self.order[index]
        members = self.groups[group]
        if not self.new and {p.side for p in members} >= {"pass", "fail"}:
            return  # its rollouts, checked for free, have both sides
        passing, failing = self.passing(group), self.failing(group)
        reference, master_key = self.reference(group, index), self.master_key(group, index)
        options = [
            reference + passing + failing if reference and passing and failing else [],
            reference + failing if reference and failing else [],
            passing + failing if passing and failing else [],
            reference + master_key if reference else [],
            # Cheaper than the reference with a master key (a rollout has its verdicts).
            passing + master_key if passing else [],
        ]
        for unit in [u for u in options if u]:
            if self.take(unit):
                break
        if requirements and failing and passing and passing[0] in self.chosen:
            # A failing answer that claims the candidate's new requirements.
            id = f"claim-{index}"
            claims = rewritten(
                id, failing[0].rollout, partial(claim_probe, requirements=requirements)
            )
            self.take([synthetic(id, "claim", group, claims, self.sources[group])])
        flagged = [p for p in members if p.side == "flagged"]
        if flagged:
            self.take(sorted(flagged, key=lambda p: -(p.current or 0))[:1])

    def take_hacks(self, hacks: Sequence[HackProbe]) -> None:
        """Remembered hacks (each with its reference: two synthetic probes) come after
        the first prompt of the step and before the others: the step's own rollouts are
        the fresh evidence, and a known hack is the likeliest thing a new criterion pays
        for."""
        if self.hacks_taken:
            return
        self.hacks_taken = True
        for index, hack in enumerate([h for h in hacks if h.reference][:MAX_HACK_PROBES]):
            group = f"memory hack {index} ({hack.rollout_id})"  # a prompt of its own
            self.take(
                [
                    Probe(
                        f"hack-{index}",
                        "hack",
                        group,
                        _hack(f"hack-{index}", hack, hack.output),
                        None,
                    ),
                    Probe(
                        f"hack-{index}-reference",
                        "reference",
                        group,
                        _hack(f"hack-{index}-reference", hack, hack.reference),
                        None,
                    ),
                ]
            )


def _hack(id: str, hack: HackProbe, output: str | None = None) -> Rollout:
    """The remembered hack's reply (or ``output``: its reference) to its prompt."""
    reply = hack.output if output is None else output
    return Rollout(id=id, input=hack.input, output=reply, supplemental_context=hack.reference)


def _replaced(reply: str, _: str) -> str:
    """``reply`` in place of any other (a rewrite made beforehand)."""
    return reply


def synthetic(
    id: str, kind: Kind, group: str, output: str | Rollout, source: CanaryRollout
) -> Probe:
    """A probe amaris writes: a reply to the source's prompt, or a rollout made from one
    (:func:`rewritten`)."""
    if isinstance(output, str):
        output = probe_rollout(id, source.input, output, source)
    probe = Probe(id, kind, group, output, source)
    probe.side = "fail" if kind in ("master_key", "claim", *CANDIDATE_ONLY) else None
    return probe
