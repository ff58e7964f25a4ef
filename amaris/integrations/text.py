"""Trainer prompts and completions as the text amaris judges."""

from __future__ import annotations

import json
from typing import Any

from amaris.jsonfile import JSONDict


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal parts: keep the text ones
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type", "text") == "text"
        )
    return "" if content is None else str(content)


def _tool_call(call: Any) -> str:
    """``{"function": {"name", "arguments"}}`` (OpenAI's and TRL's form) as
    ``tool call: name({...})``; arguments may be a dict or a JSON string."""
    if not isinstance(call, dict):
        return f"tool call: {call}"
    inner = call.get("function")
    # A tool call of the trainer's chat messages: JSON of open shape.
    function: JSONDict = inner if isinstance(inner, dict) else call
    arguments = function.get("arguments", {})
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    return f"tool call: {function.get('name', '?')}({arguments})"


def _message(message: JSONDict) -> str:  # a trainer's chat message: open JSON
    """A message's text: its content, then one line per tool call it makes."""
    calls = message.get("tool_calls") or []
    lines = [_content(message.get("content"))] if message.get("content") or not calls else []
    return "\n".join(lines + [_tool_call(c) for c in calls])


def render(value: Any) -> str:
    """Plain text as is; chat messages ``[{"role", "content"}, ...]`` as ``role: content``
    lines, so the judge sees who said what."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        value = [value]
    if isinstance(value, list | tuple) and all(isinstance(m, dict) for m in value):
        return "\n".join(f"{m.get('role', 'user')}: {_message(m)}" for m in value)
    raise TypeError(f"expected text or chat messages, got {type(value).__name__}")


def completion_text(value: Any) -> str:
    """A completion: plain text, or the text of its chat messages (the response the
    policy wrote, without role labels), tool calls included as ``tool call: name({...})``
    lines and tool answers as ``tool result: ...`` lines."""
    if isinstance(value, str):
        return value
    messages = [value] if isinstance(value, dict) else value
    if isinstance(messages, list | tuple) and all(isinstance(m, dict) for m in messages):
        return "\n".join(
            f"tool result: {_content(m.get('content'))}" if m.get("role") == "tool" else _message(m)
            for m in messages
        )
    raise TypeError(f"expected text or chat messages, got {type(value).__name__}")
