"""Reasoning kept apart from the answer: think blocks, and what a cut reply means.

Reasoning models (Qwen3, DeepSeek-R1, gpt-oss behind some servers) write their reasoning
inline, as ``<think>...</think>`` before the answer, or return it in a separate
``reasoning_content`` / ``reasoning`` field (read by the provider). Inline reasoning is
removed here before the answer is parsed: its text often holds JSON-looking drafts that a
lenient parser would take for the verdict.
"""

from __future__ import annotations

import string
from dataclasses import replace

from amaris.llm.providers import Completion

_OPEN = "<think>"
_CLOSE = "</think>"
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
"""Tags are matched case-insensitively in a copy lowered character for character (offsets
kept), by ``str.find``: linear in the reply, which the judge wrote (a backtracking pattern
is catastrophically slow on a long run of ``<think>``)."""


def split_reasoning(content: str) -> tuple[str, str | None]:
    """``content`` as (answer, inline reasoning); the reasoning is None when ``content``
    has no think tags at all (and ``""`` for an empty think block).

    Closed ``<think>...</think>`` blocks are reasoning; so is everything after an
    unterminated ``<think>`` (the reply was cut while thinking), and everything before a
    ``</think>`` with no opening tag (templates that open the block in the prompt, as
    DeepSeek-R1's and Qwen3's do).
    """
    if "hink>" not in content and "HINK>" not in content:  # the hot path: no tags at all
        return content, None
    reasoning: list[str] = []
    kept: list[str] = []
    lowered = content.translate(_ASCII_LOWER)
    position = 0
    while (opened := lowered.find(_OPEN, position)) >= 0:
        closed = lowered.find(_CLOSE, opened + len(_OPEN))
        if closed < 0:
            break
        kept.append(content[position:opened])
        reasoning.append(content[opened + len(_OPEN) : closed])
        position = closed + len(_CLOSE)
    kept.append(content[position:])
    answer = "".join(kept)
    lowered = answer.translate(_ASCII_LOWER)
    stray_close = lowered.rfind(_CLOSE)
    if stray_close >= 0:
        reasoning.insert(0, answer[:stray_close])
        answer = answer[stray_close + len(_CLOSE) :]
        lowered = lowered[stray_close + len(_CLOSE) :]
    opened = lowered.find(_OPEN)
    if opened >= 0:
        reasoning.append(answer[opened + len(_OPEN) :])
        answer = answer[:opened]
    return answer.strip(), "\n".join(part.strip() for part in reasoning if part.strip())


def without_inline_reasoning(completion: Completion) -> Completion:
    """``completion`` with its inline think blocks moved out of the answer, into
    ``reasoning`` (unless the server returned that field already)."""
    answer, inline = split_reasoning(completion.content)
    if inline is None:
        return completion
    return replace(completion, content=answer, reasoning=completion.reasoning or inline)


def cut_short(completion: Completion) -> str | None:
    """Why ``completion`` holds no answer to read, or None: cut by ``max_tokens``, or
    reasoning and no answer."""
    if completion.finish_reason == "length":
        return "cut by max_tokens (finish_reason: length)"
    if completion.reasoning is not None and not completion.content.strip():
        return "reasoning and no answer"
    return None
