"""A trainer's agent episode as the trajectory amaris scores, and the reward vector's keys.

Trainers hold an episode as OpenAI-style chat messages, each in its own dialect: tool-call
``arguments`` parsed into a dict (TRL, verl's agent loop) or left a string, tool answers
without ``tool_call_id``, multimodal content parts, extra keys (``reasoning_content``).
:func:`episode_messages` writes them in the one form ``rollout.messages`` takes, so every
adapter sends the same thing; what the server would still refuse it names in its 422.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from amaris.client.bodies import MessageBody, ToolCallBody
from amaris.integrations.text import Chat, ChatMessage, ContentPart
from amaris.trajectory import Role

FIXED_KEYS = ("anchors", "adaptive")
"""The reward vector's keys every rubric has: the reward from the anchors alone, and from
the adaptive criteria alone (null while there are none)."""


def reward_keys(anchor_ids: Sequence[str]) -> list[str]:
    """The reward keys a trainer can name before training starts: the fixed two, then each
    anchor id (anchors never change id); adaptive ids come and go with the rubric."""
    return [*FIXED_KEYS, *anchor_ids]


def _text(content: str | Sequence[ContentPart] | None) -> str | None:
    if content is None or isinstance(content, str):
        return content
    return "".join(
        str(part.get("text", ""))
        for part in content
        if isinstance(part, Mapping) and part.get("type", "text") == "text"
    )


# call: one tool call as the trainer holds it, OpenAI's nested form or flat; any JSON.
def _tool_call(call: Mapping[str, Any], fallback_id: str) -> ToolCallBody:
    inner = call.get("function")
    function = inner if isinstance(inner, Mapping) else call
    arguments = function.get("arguments", {})
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    call_id = call.get("id")
    return {
        "id": call_id if isinstance(call_id, str) and call_id else fallback_id,
        "type": "function",
        "function": {"name": str(function.get("name") or "?"), "arguments": arguments},
    }


def _as_messages(value: Chat) -> list[ChatMessage]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, Mapping):
        return [value]
    return list(value)


def episode_messages(prompt: Chat, completion: Chat = ()) -> list[MessageBody]:
    """``prompt`` then ``completion`` (text, one message or messages; a text prompt is a
    user message, a text completion an assistant one) as ``rollout.messages``.

    Tool calls get ``type: "function"``, string ``arguments`` and an id (``call_<i>_<j>``
    when the trainer gave none); a tool message without ``tool_call_id`` answers the oldest
    call not yet answered; content parts keep their text; other keys are dropped.
    """
    answer = (
        [{"role": "assistant", "content": completion}]
        if isinstance(completion, str)
        else _as_messages(completion)
    )
    sent: list[MessageBody] = []
    pending: list[str] = []
    for i, message in enumerate([*_as_messages(prompt), *answer]):
        # A role outside the four is sent as is: the server's 422 names it.
        raw = str(message.get("role", "user"))
        role = cast(Role, "system" if raw == "developer" else raw)
        body: MessageBody = {"role": role, "content": _text(message.get("content"))}
        calls = message.get("tool_calls") or []
        if calls:
            made = [_tool_call(c, f"call_{i}_{j}") for j, c in enumerate(calls)]
            body["tool_calls"] = made
            pending.extend(call["id"] for call in made)
        if role == "tool":
            given = message.get("tool_call_id")
            call_id = given if isinstance(given, str) and given else None
            if call_id is None:
                call_id = pending[0] if pending else f"call_{i}"
            if call_id in pending:
                pending.remove(call_id)
            body["tool_call_id"] = call_id
            if body["content"] is None:
                body["content"] = ""
        elif body["content"] is None and role != "assistant":
            body["content"] = ""
        sent.append(body)
    return sent
