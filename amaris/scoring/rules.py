"""Rule criteria: deterministic checks computed by amaris instead of asking the judge.

A criterion with a ``rule`` (``anchor_rubrics[].rule`` / ``adaptive_rubrics[].rule``) gets
its verdict here, without an LLM call: :data:`~amaris.rubric.scale.SCALE_MAX` when the check
holds, :data:`~amaris.rubric.scale.SCALE_MIN` when not. The verdict then counts in the
reward like a judge's (:func:`amaris.rubric.aggregate.aggregate`, the same weights); a
pitfall rule (negative weight) lowers the reward when its check holds.

The checks read ``rollout.output`` whole (never cut to the judge's context; of a trajectory,
its final answer, :meth:`~amaris.models.Rollout.answer`); ``exact`` and
``numeric`` compare its final answer with the reference answer in
``rollout.supplemental_context`` (both found by
:func:`amaris.text.answers.extract_final_answer` in the text's last
:data:`~amaris.text.answers.ANSWER_WINDOW` characters: the last ``\\boxed{}``, else the last
"answer: X", else a trailing "= X", else the last number, else the last line; a reference
written ``Answer: 42`` or ``42`` gives ``42``).

A ``regex`` pattern comes from the configuration and runs on untrusted replies. It runs on
RE2 (google-re2): time linear in the reply whatever the pattern, so no reply can buy itself
an ``unscored`` by making a rule slow; a pattern RE2 cannot compile (backreferences,
lookarounds) is refused when the configuration is read, naming the criterion
(:class:`amaris.settings.RegexRule`). The scorer runs the rules off the event loop (RE2
releases the interpreter lock while it matches).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from amaris.models import CriterionResult, Rollout
from amaris.rubric.model import Criterion
from amaris.rubric.scale import SCALE_MAX, SCALE_MIN
from amaris.settings import (
    REFERENCE_RULES,
    ExactRule,
    JsonRule,
    LengthRule,
    NumericRule,
    RegexRule,
    RuleSpec,
)
from amaris.text.answers import extract_final_answer, is_numeric
from amaris.text.chars import compile_pattern

REFERENCE_PATH = ("rollout", "supplemental_context")
REFERENCE_FIELD = ".".join(REFERENCE_PATH)


class RuleInputError(ValueError):
    """A rule criterion cannot be checked on this rollout: its reference answer is missing
    or unusable. The request's fault (a 422 naming ``field``), never a verdict."""

    def __init__(self, criterion: str, message: str) -> None:
        super().__init__(f"criterion {criterion}: {message}")
        self.field = REFERENCE_FIELD
        self.path = REFERENCE_PATH


@dataclass(frozen=True)
class Outcome:
    """A rule's result on one reply."""

    holds: bool
    reason: str


def reference_answer(criterion: Criterion, rollout: Rollout) -> str | None:
    """The canonical reference answer a rule criterion compares with; None for a rule that
    needs none.

    Raises:
        RuleInputError: an ``exact``/``numeric`` rule and no usable reference (a ``numeric``
            one needs a number).
    """
    rule = criterion.rule
    if rule is None or rule.kind not in REFERENCE_RULES:
        return None
    text = (rollout.supplemental_context or "").strip()
    if not text:
        raise RuleInputError(
            criterion.id,
            f"a {rule.kind} rule compares with the reference answer in {REFERENCE_FIELD}, "
            "which is empty",
        )
    answer = extract_final_answer(text)
    if not answer:
        raise RuleInputError(criterion.id, f"no reference answer found in {REFERENCE_FIELD}")
    if rule.kind == "numeric" and not is_numeric(answer):
        raise RuleInputError(
            criterion.id,
            f"a numeric rule needs a number as the reference answer in {REFERENCE_FIELD}; "
            f"found {answer[:80]!r}",
        )
    return answer


def check_references(criteria: Sequence[Criterion], rollout: Rollout) -> None:
    """Refuse ``rollout`` if a rule criterion among ``criteria`` has no usable reference.

    Raises:
        RuleInputError: the first such criterion.
    """
    for criterion in criteria:
        reference_answer(criterion, rollout)


def evaluate(rule: RuleSpec, output: str, reference: str | None) -> Outcome:
    """Whether ``rule`` holds for the reply ``output``; ``reference`` is the canonical
    reference answer (:func:`reference_answer`) for ``exact``/``numeric``."""
    if isinstance(rule, ExactRule | NumericRule):
        if reference is None:
            raise ValueError(f"a {rule.kind} rule needs a reference answer")
        answer = extract_final_answer(output)
        if answer is None:
            return Outcome(False, "no final answer in the reply")
        if isinstance(rule, ExactRule):
            same = answer == reference
            return Outcome(same, f"answer {answer[:80]!r} {'=' if same else '!='} {reference!r}")
        return _numeric(rule, answer, reference)
    if isinstance(rule, RegexRule):
        found = compile_pattern(rule.pattern, rule.ignore_case).search(output)
        if found is None:
            return Outcome(False, f"pattern {rule.pattern!r} not found")
        return Outcome(True, f"pattern {rule.pattern!r} found at {found.start()}")
    if isinstance(rule, LengthRule):
        size = len(output.strip())
        low = rule.min_chars if rule.min_chars is not None else 0
        high = rule.max_chars
        holds = size >= low and (high is None or size <= high)
        bounds = f"[{low}, {'-' if high is None else high}]"
        return Outcome(holds, f"{size} characters, {'within' if holds else 'outside'} {bounds}")
    if isinstance(rule, JsonRule):
        try:
            json.loads(output.strip())
        except ValueError as exc:
            return Outcome(False, f"not valid JSON: {exc}")
        except RecursionError:
            # "[" * 100000: the decoder's nesting limit, a verdict like any other invalid JSON.
            return Outcome(False, "not valid JSON: nested too deeply")
        return Outcome(True, "valid JSON")
    raise TypeError(f"unknown rule {rule!r}")


def _numeric(rule: NumericRule, answer: str, reference: str) -> Outcome:
    if not is_numeric(answer):
        return Outcome(False, f"answer {answer[:80]!r} is not a number")
    # Canonical numbers are integers, plain decimals or n/d: exact as fractions.
    got, want = Fraction(answer), Fraction(reference)
    allowed = max(Fraction(rule.abs_tol), Fraction(rule.rel_tol) * abs(want))
    holds = abs(got - want) <= allowed
    return Outcome(
        holds, f"answer {answer} {'within' if holds else 'off'} {reference} +- {allowed}"
    )


def rule_results(criteria: Sequence[Criterion], rollout: Rollout) -> dict[str, CriterionResult]:
    """The verdicts of the rule criteria among ``criteria`` on ``rollout``, by id.

    Raises:
        RuleInputError: a rule needs a reference answer the rollout does not give.
    """
    results: dict[str, CriterionResult] = {}
    for criterion in criteria:
        if criterion.rule is None:
            continue
        reference = reference_answer(criterion, rollout)
        outcome = evaluate(criterion.rule, rollout.answer(), reference)
        results[criterion.id] = CriterionResult(
            id=criterion.id,
            text=criterion.text,
            weight=criterion.weight,
            is_anchor=criterion.is_anchor,
            verdict=SCALE_MAX if outcome.holds else SCALE_MIN,
            kind="rule",
            reason=f"{criterion.rule.kind} rule: {outcome.reason}",
        )
    return results
