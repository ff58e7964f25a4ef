"""The pre-check's learned rules on the hot path, and how an alarm becomes one.

A rule matches a reply whose whole normalised text (:func:`~amaris.trust.precheck.normalise`)
equals the probe's: never a reply that merely starts with it or contains it, so a rule
learned from an opening sentence floors a reply that is *only* that sentence, and a correct
answer that opens with it is still judged. A rule is scoped to the prompt its probe came
from, except an opening sentence that is *generic*: no digit in it and no word of four
letters or more shared with its prompt ("I am confident this is right.", not "The capital
of France is a large city."), which matches as a reply to any prompt. A reply equal to the
rollout's reference answer is never floored (the pre-check's rule). Matching costs two
SHA-256 of the normalised reply and prompt (which the pre-check normalises anyway) and two
dictionary lookups: linear in the text, whatever the number of rules.
"""

from __future__ import annotations

from amaris.trust.precheck import Degenerate, normalise
from amaris.trust.rule_store import (
    PREVIEW_CHARS,
    LearnedRule,
    PrecheckRuleStore,
    ProbeKind,
    rule_key,
)

LEARNED_FROM: frozenset[ProbeKind] = frozenset({"opener", "no_answer", "half"})
"""Probe kinds whose alarm teaches a rule. A master key is floored by the built-in
pre-check already; a swapped answer is wrong for its prompt only, and no text rule can
know every wrong answer (the alarm is the signal there); an audit pair's right reward is
the audit judge's, not the floor."""
_MIN_SHARED = 4


def generic(opener: str, prompt: str) -> bool:
    """Whether an opening sentence says nothing about its prompt: no digit, and no word of
    :data:`_MIN_SHARED` letters or more in common with it."""
    norm = normalise(opener)
    if any(char.isdigit() for char in norm):
        return False
    words = {w for w in norm.split() if len(w) >= _MIN_SHARED}
    return not words & set(normalise(prompt).split())


def new_rule(
    *,
    kind: ProbeKind,
    text: str,
    prompt: str,
    step: int,
    scope: str,
    rollout_id: str | None,
    reward: float,
) -> LearnedRule:
    """The rule an alarm on the probe ``text`` (a reply to ``prompt``) teaches; its
    ``added_in`` is set by the store."""
    norm = normalise(text)
    any_prompt = kind == "opener" and generic(text, prompt)
    key = rule_key(norm, None if any_prompt else normalise(prompt))
    return LearnedRule(
        id=key[:12],
        key=key,
        any_prompt=any_prompt,
        kind=kind,
        preview=text[:PREVIEW_CHARS],
        chars=len(text),
        step=step,
        scope=scope,
        rollout_id=rollout_id,
        reward=round(reward, 4),
        added_in=1,
    )


class LearnedRules:
    """The hot path's view of the store: :meth:`match` a normalised reply."""

    def __init__(self, store: PrecheckRuleStore) -> None:
        self._store = store

    def in_force(self) -> bool:
        """Whether any rule is in force (else :meth:`match` matches nothing, and the
        pre-check need not normalise a reply whole to ask it)."""
        return bool(self._store.index())

    def match(self, norm: str, prompt: str) -> Degenerate | None:
        """Why the normalised reply ``norm`` to the normalised ``prompt`` is floored by a
        learned rule."""
        index = self._store.index()
        if not index:
            return None
        rule = index.get(rule_key(norm, None)) or index.get(rule_key(norm, prompt))
        if rule is None:
            return None
        return Degenerate(
            "learned",
            f"rule {rule.id} of the learned pre-check rules: the {rule.kind} probe of "
            f"step {rule.step} the judge paid {rule.reward:.2f}",
        )
