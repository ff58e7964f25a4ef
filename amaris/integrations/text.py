"""Trainer prompts and completions as the text amaris judges."""

from __future__ import annotations

from typing import Any


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


def render(value: Any) -> str:
    """Plain text as is; chat messages ``[{"role", "content"}, ...]`` as ``role: content``
    lines, so the judge sees who said what."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        value = [value]
    if isinstance(value, list | tuple) and all(isinstance(m, dict) for m in value):
        return "\n".join(f"{m.get('role', 'user')}: {_content(m.get('content'))}" for m in value)
    raise TypeError(f"expected text or chat messages, got {type(value).__name__}")


def completion_text(value: Any) -> str:
    """A completion: plain text, or the content of its chat messages (the response the
    policy wrote, without role labels)."""
    if isinstance(value, str):
        return value
    messages = [value] if isinstance(value, dict) else value
    if isinstance(messages, list | tuple) and all(isinstance(m, dict) for m in messages):
        return "\n".join(_content(m.get("content")) for m in messages)
    raise TypeError(f"expected text or chat messages, got {type(value).__name__}")
