"""Trainer prompts and completions as the text amaris judges."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypeAlias, TypedDict


class ToolFunction(TypedDict, total=False):
    """The function a tool call names (OpenAI's and TRL's ``function``)."""

    name: str
    # The tool's own arguments: JSON of the tool's schema (not amaris's to know), or that
    # JSON as a string.
    arguments: str | dict[str, Any]


class ToolCall(ToolFunction, total=False):
    """One of a message's ``tool_calls``: ``{"function": {"name", "arguments"}}``, or the
    function's fields at the top level; ``id`` names it for the tool message answering it."""

    id: str
    type: str
    function: ToolFunction


class ContentPart(TypedDict, total=False):
    """A part of a multimodal ``content``; only ``text`` parts are judged."""

    type: str
    text: str


class ChatMessage(TypedDict, total=False):
    """A message of a trainer's chat (OpenAI's form): the fields amaris reads; the others
    (``name``, ``reasoning_content``...) are left alone."""

    role: str
    content: str | list[ContentPart] | None
    tool_call_id: str
    tool_calls: list[ToolCall]


Chat: TypeAlias = str | ChatMessage | Sequence[ChatMessage]
"""A prompt or a completion as a trainer passes it: text, one message, or messages."""


def _content(content: str | list[ContentPart] | None) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal parts: keep the text ones
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type", "text") == "text"
        )
    return "" if content is None else str(content)


def _tool_call(call: ToolCall) -> str:
    """``{"function": {"name", "arguments"}}`` (OpenAI's and TRL's form) as
    ``tool call: name({...})``; arguments may be a dict or a JSON string."""
    if not isinstance(call, dict):
        return f"tool call: {call}"
    inner = call.get("function")
    function: ToolFunction = inner if isinstance(inner, dict) else call
    arguments = function.get("arguments", {})
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    return f"tool call: {function.get('name', '?')}({arguments})"


def _message(message: ChatMessage) -> str:
    """A message's text: its content, then one line per tool call it makes."""
    calls = message.get("tool_calls") or []
    lines = [_content(message.get("content"))] if message.get("content") or not calls else []
    return "\n".join(lines + [_tool_call(c) for c in calls])


def _messages(value: Chat) -> Sequence[ChatMessage] | None:
    """The messages of ``value`` (one message as a list of one), None if not messages."""
    messages = [value] if isinstance(value, dict) else value
    if isinstance(messages, list | tuple) and all(isinstance(m, dict) for m in messages):
        return messages
    return None


def render(value: Chat) -> str:
    """Plain text as is; chat messages ``[{"role", "content"}, ...]`` as ``role: content``
    lines, so the judge sees who said what.

    Raises:
        TypeError: ``value`` is neither text nor chat messages.
    """
    if isinstance(value, str):
        return value
    messages = _messages(value)
    if messages is None:
        raise TypeError(f"expected text or chat messages, got {type(value).__name__}")
    return "\n".join(f"{m.get('role', 'user')}: {_message(m)}" for m in messages)


def completion_text(value: Chat) -> str:
    """A completion: plain text, or the text of its chat messages (the response the
    policy wrote, without role labels), tool calls included as ``tool call: name({...})``
    lines and tool answers as ``tool result: ...`` lines.

    Raises:
        TypeError: ``value`` is neither text nor chat messages.
    """
    if isinstance(value, str):
        return value
    messages = _messages(value)
    if messages is None:
        raise TypeError(f"expected text or chat messages, got {type(value).__name__}")
    return "\n".join(
        f"tool result: {_content(m.get('content'))}" if m.get("role") == "tool" else _message(m)
        for m in messages
    )
