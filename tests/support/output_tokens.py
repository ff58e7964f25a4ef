"""The longest reply a strict JSON schema allows and its tokens, counted independently of
:mod:`amaris.llm.output_fit`'s own estimate (tests/llm/test_output_fit.py and
test_output_fit_gateway.py): its text as xgrammar writes JSON, every punctuation character
and space a token, runs of letters, digits and underscores at ``OUTPUT_CHARS_PER_TOKEN``
characters a token."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from amaris.llm.output_fit import OUTPUT_CHARS_PER_TOKEN


def longest_reply(node: dict[str, Any]) -> Any:
    """The longest value ``node`` allows: every string and list filled to its bound, every
    number at its longest."""
    if "enum" in node or "const" in node:
        options = node.get("enum", [node.get("const")])
        return max(options, key=lambda v: len(json.dumps(v)))
    if "anyOf" in node:
        branches = [longest_reply(b) for b in node["anyOf"]]
        return max(branches, key=lambda v: tokens(json.dumps(v)))
    kind = node["type"]
    if kind == "object":
        return {name: longest_reply(sub) for name, sub in node["properties"].items()}
    if kind == "array":
        return [longest_reply(node["items"]) for _ in range(node["maxItems"])]
    if kind == "string":
        return "x" * node["maxLength"]
    if kind == "integer":
        if "minimum" in node and "maximum" in node:
            return max(node["minimum"], node["maximum"], key=lambda v: len(str(v)))
        return -12345678901
    if kind == "number":
        return -0.1234567891
    if kind == "boolean":
        return False
    assert kind == "null", node
    return None


def tokens(text: str) -> int:
    """Conservative tokens of ``text``: a token per punctuation character or space, runs of
    word characters at ``OUTPUT_CHARS_PER_TOKEN`` characters a token."""
    words = re.findall(r"\w+", text)
    punctuation = len(re.sub(r"\w+", "", text))
    return punctuation + sum(math.ceil(len(w) / OUTPUT_CHARS_PER_TOKEN) for w in words)


def reply_tokens(schema: dict[str, Any]) -> int:
    """Tokens of the longest reply ``schema`` allows, as xgrammar writes JSON."""
    return tokens(json.dumps(longest_reply(schema), separators=(", ", ": ")))
