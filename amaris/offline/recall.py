"""What the offline updater reads in retrieved memory: per reward-hacking tag, the steps it was
seen at and the steps a pitfall against it was added or retired.

The updater's memory is the static items (recent step summaries) and the dynamic ones
(analyses, summaries and rubric updates found by semantic search), each ``{"type", "step",
"text"}``. A summary or finding whose text names a tag saw that tag at its step. A rubric
update whose version was published records its changes with the phrases
:data:`ADDED` / :data:`RETIRED` followed by the tag, which the offline updater writes in
each modification's reason (and the step pipeline stores in the update's memory text).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from amaris.agents.payloads import MemoryItem, UpdaterData
from amaris.offline import tags
from amaris.text.chars import compile_pattern

ADDED = "pitfall added against"
"""Opens the reason of every pitfall the offline updater adds: the tag follows."""
RETIRED = "pitfall retired against"
"""Opens the reason of every pitfall the offline updater retires: the tag follows."""
_CHANGE = compile_pattern(rf"({ADDED}|{RETIRED}) ([a-z_]+)")  # on memory: LLM-written


@dataclass
class TagHistory:
    """One tag as memory shows it."""

    seen: set[int] = field(default_factory=set)
    """Steps whose summary, finding or rubric update shows the behaviour."""
    added: set[int] = field(default_factory=set)
    """Steps whose published update added a pitfall against it."""
    retired: set[int] = field(default_factory=set)
    """Steps whose published update retired a pitfall against it."""

    @property
    def resurgent(self) -> bool:
        """A pitfall against it was added, then retired: a return is a resurgence."""
        return bool(self.added and self.retired and min(self.added) < max(self.retired))

    def last_seen(self) -> int | None:
        """The latest step memory shows the behaviour at, if any."""
        return max(self.seen) if self.seen else None


def memory_items(data: UpdaterData) -> list[MemoryItem]:
    """The static items (typed ``static``) then the dynamic ones of an updater payload."""
    items: list[MemoryItem] = [{"type": "static", **item} for item in data.get("static_memory", [])]
    return items + [item.copy() for item in data.get("dynamic_memory", [])]


def _published(text: str) -> bool:
    """A rubric update's memory text opens with "(STRATEGY, outcome)": only a published
    one changed the rubric."""
    header = text.split(":", 1)[0]
    return "published" in header


def histories(items: Iterable[MemoryItem]) -> dict[str, TagHistory]:
    """Per known tag, what the memory items show (tags memory never names are left out)."""
    found: dict[str, TagHistory] = {}
    for item in items:
        step = item.get("step")
        if not isinstance(step, int):
            continue
        text = str(item.get("text") or "")
        if item.get("type") == "rubric_update":
            if not _published(text):
                continue
            for verb, tag in ((m.group(1), m.group(2)) for m in _CHANGE.finditer(text)):
                if tag not in tags.BY_TAG:
                    continue
                history = found.setdefault(tag, TagHistory())
                if verb == ADDED:
                    history.added.add(step)
                    history.seen.add(step)
                else:
                    history.retired.add(step)
            continue
        lowered = text.lower()
        for tag in tags.BY_TAG:
            if tag in lowered:
                found.setdefault(tag, TagHistory()).seen.add(step)
    return found


def steps_text(steps: Iterable[int]) -> str:
    """``"3, 5"`` for steps {5, 3}."""
    return ", ".join(str(s) for s in sorted(steps))
