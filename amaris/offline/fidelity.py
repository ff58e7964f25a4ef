"""The offline updater's answer to a fidelity alarm (``fidelity_alarm`` in its data).

The audit judge disagrees with the reward served on the evidence rollouts: the training
judge pays for something the audit does not. The rule: the known behaviour (a tag of
:mod:`amaris.offline.tags`) that at least half of the evidence rollouts show is what the
judge now misreads; the update words the pitfall against it afresh, whatever its count in
the step (the audit's sample is the evidence). When a pitfall already targets it (the
judge no longer reads that one) it is *edited* to the new wording: same id and meaning, so
the judge reads it again and nothing near-duplicates it (an added copy would be refused by
the guardrails as one); else a sharpened pitfall is added. Once per behaviour: a sharpened
pitfall already in the rubric is not worded afresh again.
"""

from __future__ import annotations

from collections import Counter

from amaris.agents.payloads import AlarmData
from amaris.offline import tags

SHARED_SHARE = 0.5
"""A behaviour is what the evidence rollouts share when at least this share shows it."""
REWORDED = "pitfall worded afresh against"
"""Opens the reason of an edit that answers an alarm: the tag follows."""
SHARPENED = "(a fidelity alarm found the reward paying for it)"
"""Appended to a sharpened pitfall's text; no word of it selects another offline rule
(a word such as "judge" would read as grader manipulation)."""


def shared_tag(alarm: AlarmData) -> str | None:
    """The known behaviour most of the alarm's disagreeing rollouts show (at least
    :data:`SHARED_SHARE` of them; ties in :data:`amaris.offline.tags.TAGS` order), or None."""
    rollouts = alarm.get("rollouts") or []
    if not rollouts:
        return None
    counts: Counter[str] = Counter()
    for rollout in rollouts:
        shown = {tag.tag for tag, _ in tags.detect_all(str(rollout.get("output") or ""), None)}
        # The evidence's reply is clipped: its length is in output_words.
        words = rollout.get("output_words")
        if isinstance(words, int) and words >= tags.VERBOSE_WORDS:
            shown.add("verbosity_padding")
        counts.update(shown)
    order = [t.tag for t in tags.TAGS]
    ranked = sorted(counts, key=lambda t: (-counts[t], order.index(t)))
    if not ranked or counts[ranked[0]] < SHARED_SHARE * len(rollouts):
        return None
    return ranked[0]


def sharpened_pitfall(tag: str) -> str:
    """The text of the pitfall added against ``tag`` on an alarm."""
    return f"{tags.BY_TAG[tag].pitfall.rstrip('.')} {SHARPENED}."
