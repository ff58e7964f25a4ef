"""A trajectory as the judge reads it, within a character budget.

The judge reads a trajectory rollout through its derived texts: the task
(``rollout.input``, the prompt messages) and what the policy did (``rollout.output``: the
numbered messages with their tool calls and results, then the outcome and the finish
reason; :func:`amaris.trajectory.trajectory_text`). When that does not fit the judge's
budget (``scoring.max_field_chars`` with ``scoring.oversize: truncate``, or the judge's
context window), :meth:`TrajectoryView.text` cuts the episode by its parts rather than at
a character position, each step only while the text is still over the budget:

1. tool calls compacted (ids and names clipped, arguments cut to :data:`ARGUMENT_CHARS`)
   and a message content longer than :data:`CONTENT_SHARE` of the budget cut in its middle;
2. message contents elided from the middle of the trajectory outward (its first and last
   messages go last); each run of elided messages is one line, ``[messages 5-40 elided: 36
   messages, 120000 characters]``, and an elided assistant message keeps its tool-call lines
   under its ``[i] assistant:`` header;
3. those tool-call lines elided too, from the middle outward (the run's line counts them);
4. the final answer (the last assistant message) cut in its middle;
5. the text cut in its middle (only an outcome larger than the budget gets here).

So the outcome and finish reason lines, the final answer and every tool call are kept as
long as they fit. Linear in the trajectory: each message is rendered at most twice and the
elided window grows by one message a step. The text travels in the judge's data block as
one JSON string (:func:`amaris.agents.prompts.data_message`), so no content, cut or whole,
can close the block.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from amaris.llm.budget import cut_middle, share_out
from amaris.models import Rollout
from amaris.trajectory import Message, ToolCall, message_lines, outcome_lines

ARGUMENT_CHARS = 200
"""A compacted tool call's arguments are cut to this many characters."""
NAME_CHARS = 64
"""A compacted tool call's id and function name (and a tool result's call id) are clipped
to this many characters."""
CONTENT_SHARE = 8
"""When the trajectory is over the budget, a message content longer than the budget
divided by this is cut in its middle first (one huge tool result does not push out the rest)."""
MIN_CONTENT_CHARS = 256
"""A content is not cut below this many characters by that first step."""

_FULL, _BARE, _GONE = 0, 1, 2
"""What is shown of an entry: everything, its tool calls only, nothing."""


def _clip(text: str, limit: int) -> str:
    """``text``, its middle replaced by ``...`` when longer than ``limit``."""
    if len(text) <= limit:
        return text
    half = max(0, limit - 3) // 2
    return text[:half] + "..." + text[len(text) - half :]


def _compact(call: ToolCall) -> ToolCall:
    function = call.function.model_copy(
        update={
            "name": _clip(call.function.name, NAME_CHARS),
            "arguments": _clip(call.function.arguments, ARGUMENT_CHARS),
        }
    )
    return call.model_copy(update={"id": _clip(call.id, NAME_CHARS), "function": function})


def _cut(text: str, limit: int) -> str:
    """``text`` cut in its middle to ``limit`` characters when it is longer."""
    return text if len(text) <= limit else cut_middle(text, limit)


def _cost(lines: list[str]) -> int:
    """Characters ``lines`` take in the text, each with its line break."""
    return sum(len(line) + 1 for line in lines)


@dataclass
class _Entry:
    """One message of the trajectory, rendered whole and with its content elided."""

    index: int
    full: list[str]
    bare: list[str]
    """The lines left when its content is elided: an assistant's header and tool calls."""
    chars: int
    """Characters of its content as sent."""
    calls: int
    full_cost: int = field(init=False)
    bare_cost: int = field(init=False)
    state: int = _FULL

    def __post_init__(self) -> None:
        self.full_cost = _cost(self.full)
        self.bare_cost = _cost(self.bare)


def _entry(index: int, message: Message, cap: int | None) -> _Entry:
    """Message ``index`` with its calls compacted and its content cut to ``cap``."""
    text = message.text()
    calls = [_compact(call) for call in message.tool_calls or ()]
    call_id = message.tool_call_id
    shown = message.model_copy(
        update={
            "content": text if cap is None else _cut(text, cap),
            "tool_calls": calls or message.tool_calls,
            "tool_call_id": None if call_id is None else _clip(call_id, NAME_CHARS),
        }
    )
    full = message_lines(index, shown)
    bare = message_lines(index, shown.model_copy(update={"content": None})) if calls else []
    return _Entry(index, full, bare, len(text), len(calls))


def _middle_out(count: int) -> Iterator[int]:
    """``0..count-1`` from the middle outward: each prefix is one contiguous window."""
    if count <= 0:
        return
    middle = (count - 1) // 2
    yield middle
    for step in range(1, count):
        if middle + step < count:
            yield middle + step
        if middle - step >= 0:
            yield middle - step


def _note(first: int, last: int, chars: int, calls: int) -> str:
    """The line that stands for messages ``first``-``last``, elided."""
    what = f"messages {first}-{last}" if last > first else f"message {first}"
    count = f"{last - first + 1} messages, " if last > first else ""
    dropped = f", {calls} tool calls" if calls else ""
    return f"[{what} elided: {count}{chars} characters{dropped}]"


@dataclass(frozen=True)
class TrajectoryView:
    """A trajectory rollout's messages, outcome and finish reason, rendered for the judge."""

    messages: Sequence[Message]
    tail: tuple[str, ...]
    """The outcome and finish reason lines (:func:`amaris.trajectory.outcome_lines`)."""
    whole: str
    """The whole text (``rollout.output``)."""

    @classmethod
    def of(cls, rollout: Rollout) -> TrajectoryView | None:
        """The view of a trajectory rollout; None for a string rollout."""
        if rollout.messages is None:
            return None
        tail = outcome_lines(rollout.outcome, rollout.finish_reason)
        return cls(rollout.messages, tuple(tail), rollout.output)

    @functools.cached_property
    def turns(self) -> tuple[int, ...]:
        """The indexes of the assistant messages (the turns the judge may attribute to)."""
        return tuple(i for i, m in enumerate(self.messages) if m.role == "assistant")

    def text(self, limit: int) -> str:
        """The text the judge reads, at most ``limit`` characters (see the module's steps);
        the whole text when it fits."""
        if len(self.whole) <= limit:
            return self.whole
        turns = self.turns
        final = turns[-1]
        cap = max(MIN_CONTENT_CHARS, limit // CONTENT_SHARE)
        entries = [
            _entry(i, self.messages[i], None if i == final else cap)
            for i in range(turns[0], len(self.messages))
        ]
        tail = list(self.tail)
        candidates = [e for e in entries if e.index != final]
        # Room for the elision lines: at most two (the final answer may split the run),
        # neither longer than one that counts every message, character and call.
        widest = _note(turns[0], len(self.messages), sum(e.chars for e in entries), 10**6)
        runs = 1 if final == len(self.messages) - 1 else 2
        budget = limit + 1 - runs * (len(widest) + 1)  # + 1: the last line has no break
        total = sum(e.full_cost for e in entries) + _cost(tail)
        order = list(_middle_out(len(candidates)))
        for position in order:
            if total <= budget:
                break
            entry = candidates[position]
            entry.state = _BARE
            total += entry.bare_cost - entry.full_cost
        for position in order:
            if total <= budget:
                break
            entry = candidates[position]
            entry.state = _GONE
            total -= entry.bare_cost
        if total > budget:
            answer = self.messages[final].text()
            room = max(0, len(answer) - (total - budget))
            shown = self.messages[final].model_copy(update={"content": _cut(answer, room)})
            entries[final - turns[0]] = _entry(final, shown, None)
        rendered = "\n".join(_render(entries) + tail)
        return _cut(rendered, limit)


def _render(entries: list[_Entry]) -> list[str]:
    """The entries' lines, each run of elided messages as one note and its kept calls."""
    lines: list[str] = []
    kept: list[str] = []
    run: list[int] | None = None  # first, last, characters, tool calls elided

    def flush() -> None:
        nonlocal run
        if run is not None:
            lines.append(_note(*run))
            lines.extend(kept)
            kept.clear()
            run = None

    for entry in entries:
        if entry.state == _FULL:
            flush()
            lines.extend(entry.full)
            continue
        if run is None or run[1] != entry.index - 1:
            flush()
            run = [entry.index, entry.index, 0, 0]
        run[1] = entry.index
        run[2] += entry.chars
        if entry.state == _BARE:
            kept.extend(entry.bare)
        else:
            run[3] += entry.calls
    flush()
    return lines


def fit_fields(
    view: TrajectoryView,
    fields: dict[str, str],
    room: int,
    encoded: Callable[[str], int] = len,
) -> tuple[dict[str, str], list[str]]:
    """A trajectory's judged ``fields`` within ``room`` characters once ``encoded`` (as
    :func:`amaris.llm.budget.fit_texts` shares the room: short fields whole, long ones cut
    alike), its ``output`` by :meth:`TrajectoryView.text`, the others in their middle.

    Returns:
        The fields, and the names of those cut.
    """
    sizes = {name: encoded(text) for name, text in fields.items()}
    if sum(sizes.values()) <= room:
        return fields, []
    allowed = share_out(sizes, room)
    fitted: dict[str, str] = {}
    cut: list[str] = []
    for name, text in fields.items():
        if sizes[name] <= allowed[name]:
            fitted[name] = text
            continue
        cut.append(name)
        if name == "output":
            fitted[name] = _output_within(view, allowed[name], sizes[name], encoded)
        else:
            fitted[name] = cut_middle(text, allowed[name] * len(text) // max(1, sizes[name]))
    return fitted, cut


def _output_within(
    view: TrajectoryView, allowed: int, size: int, encoded: Callable[[str], int]
) -> str:
    """The view's text taking at most ``allowed`` once encoded: a character limit scaled
    by the whole text's encoding, shrunk by what the cut text took (escapes differ)."""
    limit = allowed * len(view.whole) // max(1, size)
    text = view.text(limit)
    for _ in range(3):
        got = encoded(text)
        if got <= allowed:
            return text
        limit = limit * allowed // got - 1
        text = view.text(max(0, limit))
    # An encoding takes at most 6 characters a character (``\\u001f``), and 2 quotes.
    return _cut(text, max(0, allowed - 2) // 6)
