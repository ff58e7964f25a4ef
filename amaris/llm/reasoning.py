"""Reasoning kept apart from the answer: think blocks, and what a cut reply means.

Reasoning models (Qwen3, DeepSeek-R1, gpt-oss behind some servers) write their reasoning
inline, as ``<think>...</think>`` before the answer, or return it in a separate
``reasoning_content`` / ``reasoning`` field (read by the provider). Inline reasoning is
removed here before the answer is parsed: its text often holds JSON-looking drafts that a
lenient parser would take for the verdict.
"""

from __future__ import annotations

import re

_BLOCK = re.compile(r"<think>(.*?)</think>", re.DOTALL | re.IGNORECASE)
_OPEN = re.compile(r"<think>", re.IGNORECASE)
_CLOSE = re.compile(r"</think>", re.IGNORECASE)


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

    def keep(match: re.Match[str]) -> str:
        reasoning.append(match.group(1))
        return ""

    answer = _BLOCK.sub(keep, content)
    stray_close = max(_CLOSE.finditer(answer), key=lambda m: m.start(), default=None)
    if stray_close is not None:
        reasoning.insert(0, answer[: stray_close.start()])
        answer = answer[stray_close.end() :]
    opened = _OPEN.search(answer)
    if opened is not None:
        reasoning.append(answer[opened.end() :])
        answer = answer[: opened.start()]
    return answer.strip(), "\n".join(part.strip() for part in reasoning if part.strip())
