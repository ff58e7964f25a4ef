"""A rollout as an agent's trajectory: OpenAI chat messages with tool calls, the
environment's verifiable outcome, and why the episode ended.

A trajectory rollout sends ``messages`` instead of ``input`` and ``output``; amaris derives
those two texts from it (:func:`prompt_text`, :func:`trajectory_text`), so everything that
reads a rollout's text (the judge, the analyzer, memory, the score cache, the pre-check)
reads the whole episode: turns numbered with their roles, tool calls and results, the
outcome and the finish reason.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from amaris.jsonfile import JSONDict
from amaris.text_fields import StrictText, Text

MAX_MESSAGES = 1024
"""Most messages in one trajectory (every role counted)."""
MAX_TOOL_CALLS = 64
"""Most tool calls in one assistant message."""

Role = Literal["system", "user", "assistant", "tool"]
FinishReason = Literal["stop", "length", "tool_limit", "timeout", "error"]
"""Why the episode ended: the policy stopped, hit its token limit, its tool-call limit or
its time limit, or the environment failed."""


def field_error(loc: tuple[str | int, ...], kind: str, message: str, value: Any) -> ValidationError:
    """A validation error at ``loc`` below the model being validated: raised from a
    model validator, it names the field itself rather than the model."""
    error = PydanticCustomError(kind, message)
    return ValidationError.from_exception_data(
        "Rollout", [InitErrorDetails(type=error, loc=loc, input=value)]
    )


class TextPart(BaseModel):
    """One part of a message's content given as parts: only text parts are scored."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    text: Text


Content = Text | list[TextPart]


class ToolFunction(BaseModel):
    """The function a tool call invokes, as OpenAI sends it."""

    model_config = ConfigDict(extra="forbid")

    name: Text = Field(min_length=1, max_length=256)
    arguments: StrictText = Field(description="The arguments as the policy wrote them: a string.")


class ToolCall(BaseModel):
    """One tool call of an assistant message."""

    model_config = ConfigDict(extra="forbid")

    id: Text = Field(min_length=1, max_length=512)
    type: Literal["function"] = "function"
    function: ToolFunction


class Message(BaseModel):
    """One message of an OpenAI chat conversation: ``system``, ``user``, ``assistant``
    (optionally with ``tool_calls``) or ``tool`` (with ``tool_call_id``)."""

    model_config = ConfigDict(extra="forbid")

    role: Role
    content: Content | None = Field(
        default=None, description="Text, or text parts. Only an assistant's may be null."
    )
    name: Text | None = Field(default=None, max_length=256)
    tool_calls: list[ToolCall] | None = Field(
        default=None, max_length=MAX_TOOL_CALLS, description="An assistant message's calls."
    )
    tool_call_id: Text | None = Field(
        default=None, min_length=1, max_length=512, description="A tool message's call."
    )

    @model_serializer(mode="wrap")
    def _set_fields(self, handler: SerializerFunctionWrapHandler) -> JSONDict:
        # Only the fields the message has: a stored trajectory stays the size it came.
        data: JSONDict = handler(self)
        return {k: v for k, v in data.items() if v is not None or k == "content"}

    def text(self) -> str:
        """The message's text (text parts joined)."""
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


def check_messages(messages: Sequence[Message]) -> None:
    """What a trajectory's messages must hold beyond each message's own fields.

    Raises:
        ValidationError: naming ``messages[i].<field>``: a tool call on a message that is
            not an assistant's, a ``tool`` message without ``tool_call_id`` (or another
            role with one), a null content outside an assistant message, or no assistant
            message at all (nothing to score).
    """
    for i, message in enumerate(messages):
        if message.tool_calls is not None and message.role != "assistant":
            raise field_error(
                ("messages", i, "tool_calls"),
                "tool_calls_role",
                "only an assistant message makes tool calls",
                message.role,
            )
        if (message.role == "tool") != (message.tool_call_id is not None):
            raise field_error(
                ("messages", i, "tool_call_id"),
                "tool_call_id",
                "a tool message names its tool_call_id; no other role has one",
                message.tool_call_id,
            )
        if message.content is None and message.role != "assistant":
            raise field_error(
                ("messages", i, "content"),
                "missing_content",
                "only an assistant message may have a null content",
                None,
            )
    if not any(m.role == "assistant" for m in messages):
        raise field_error(
            ("messages",),
            "no_assistant",
            "has no assistant message: nothing the policy did to score",
            len(messages),
        )


def first_assistant(messages: Sequence[Message]) -> int:
    """Index of the first assistant message (the prompt is everything before it)."""
    return next(i for i, m in enumerate(messages) if m.role == "assistant")


def _indented(text: str) -> str:
    """``text`` with every line after its first indented by two spaces."""
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\n  ")


def _call(call: ToolCall) -> str:
    return _indented(f"call {call.id}: {call.function.name}({call.function.arguments})")


def message_lines(index: int, message: Message) -> list[str]:
    """One message as the judge and the analyzer read it: ``[index] role: text``, then
    one line per tool call; a tool result names the call it answers. The text's own line
    breaks are indented, so only amaris starts a line with ``[i]``, ``outcome:`` or
    ``finish reason:``: a message cannot forge a turn or an outcome."""
    role = message.role if message.role != "tool" else f"tool result for {message.tool_call_id}"
    lines = [_indented(f"[{index}] {role}: {message.text()}")]
    lines.extend(f"    {_call(call)}" for call in message.tool_calls or ())
    return lines


def prompt_text(messages: Sequence[Message]) -> str:
    """The task: the messages before the first assistant message. One user message alone
    is its text, so a trajectory and a string request with the same prompt share a group
    and a per-instance rubric; several are ``role: text`` lines."""
    prompt = messages[: first_assistant(messages)]
    if len(prompt) == 1 and prompt[0].role == "user":
        return prompt[0].text()
    return "\n".join(f"{m.role}: {m.text()}" for m in prompt)


def outcome_lines(outcome: JSONDict | None, finish_reason: str | None) -> list[str]:
    """The environment's verdict as evidence lines (none when neither is given)."""
    lines = []
    if outcome is not None:
        lines.append("outcome: " + json.dumps(outcome, ensure_ascii=False, separators=(", ", ": ")))
    if finish_reason is not None:
        lines.append(f"finish reason: {finish_reason}")
    return lines


def trajectory_text(
    messages: Sequence[Message], outcome: JSONDict | None, finish_reason: str | None
) -> str:
    """What the policy did: every message from the first assistant one on, numbered as in
    the request, then the outcome and the finish reason."""
    start = first_assistant(messages)
    lines: list[str] = []
    for index in range(start, len(messages)):
        lines.extend(message_lines(index, messages[index]))
    return "\n".join(lines + outcome_lines(outcome, finish_reason))


def final_answer(messages: Sequence[Message]) -> str:
    """The last assistant message's text: what rule criteria (``exact``, ``regex``) check."""
    return next(m.text() for m in reversed(messages) if m.role == "assistant")


class TurnReward(BaseModel):
    """One assistant turn's share of a trajectory's reward (``include_turns``;
    :mod:`amaris.scoring.turn_rewards`)."""

    index: int = Field(description="The assistant message's index in `rollout.messages`.")
    reward: float = Field(
        description="The turn's share of `score`: the turns' rewards sum to it. Negative "
        "when a pitfall attributed to the turn takes away more than the turn earned."
    )
    met: list[str] = Field(
        default_factory=list,
        description="Ids of the criteria met (the judge attributed them to this turn).",
    )
    broke: list[str] = Field(
        default_factory=list,
        description="Ids of the pitfall criteria whose behaviour this turn showed.",
    )


IncludeTurns = Annotated[
    bool,
    Field(
        description="Of a trajectory (`rollout.messages`): add `turns`, the reward spread over "
        "its assistant turns."
    ),
]
"""``ScoreRequest.include_turns``."""
TurnRewards = Annotated[
    list[TurnReward] | None,
    Field(
        description="Asked with `include_turns`, of a scored trajectory: one entry per "
        "assistant message, in order, with its share of `score` and the criteria it met or "
        "broke. Null for a string rollout, when not asked, or when not scored."
    ),
]
"""``ScoreResponse.turns``."""


TRAJECTORY_FIELDS = ("messages", "outcome", "finish_reason")
"""A rollout's fields that only a trajectory sends."""


def check_form(data: JSONDict) -> None:
    """Either ``input`` and ``output``, or ``messages`` (with an optional outcome and
    finish reason): a request never sends both forms.

    Raises:
        ValidationError: naming the field sent in the wrong form, or each one missing.
    """
    if data.get("messages") is None:
        only = [name for name in TRAJECTORY_FIELDS[1:] if data.get(name) is not None]
        if only:
            raise field_error(
                (only[0],), "needs_messages", "is sent with messages only", data[only[0]]
            )
        missing = [name for name in ("input", "output") if name not in data]
        if missing:
            raise ValidationError.from_exception_data(
                "Rollout",
                [InitErrorDetails(type="missing", loc=(name,), input=data) for name in missing],
            )
        return
    for name in ("input", "output"):
        if name in data:
            raise field_error(
                (name,),
                "not_with_messages",
                "is not sent with messages: amaris derives it from them",
                data[name],
            )


def wire_form(dumped: JSONDict, trajectory: bool) -> JSONDict:
    """A rollout's dump in the form a request sends it, so that it validates again: a
    trajectory without its derived texts, a string rollout without a trajectory's fields."""
    for name in ("input", "output") if trajectory else TRAJECTORY_FIELDS:
        dumped.pop(name, None)
    return dumped
