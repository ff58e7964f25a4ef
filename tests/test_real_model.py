"""The real-model tier: amaris against SmolLM2-135M-Instruct behind ``tests/real_llm.py``.

A 135M model's verdicts are noise: these tests assert parsing, types, flow and accounting,
never verdict quality. Every test here shares the session's one server (one model load).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.real_llm import MODEL_ID, RealLLM

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

GRADE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "grade": {"type": "integer", "enum": [0, 1, 2, 3, 4]},
        "label": {"type": "string", "enum": ["right", "wrong"]},
    },
    "required": ["grade", "label"],
    "additionalProperties": False,
}
MESSAGES = [
    {"role": "system", "content": "Grade the answer from 0 to 4. Reply in JSON."},
    {"role": "user", "content": "Question: 6 * 7? Answer: 42"},
]


def _chat(server: RealLLM, mode: str, **body: Any) -> httpx.Response:
    return httpx.post(
        f"{server.base_url(mode)}/chat/completions",
        json={"model": MODEL_ID, "messages": MESSAGES, **body},
        timeout=300,
    )


def test_server_decodes_to_the_json_schema_and_reports_usage(real_llm: RealLLM) -> None:
    before = real_llm.stats()["normal"]
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "grade", "strict": True, "schema": GRADE_SCHEMA},
    }
    answer = _chat(real_llm, "normal", response_format=response_format, max_tokens=40)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop"
    parsed = json.loads(choice["message"]["content"])
    assert list(parsed) == ["grade", "label"]
    assert parsed["grade"] in range(5) and parsed["label"] in ("right", "wrong")
    usage = body["usage"]
    assert usage["prompt_tokens"] > 10 and usage["completion_tokens"] > 3

    cut = _chat(real_llm, "normal", response_format=response_format, max_tokens=3).json()
    assert cut["choices"][0]["finish_reason"] == "length"
    assert cut["usage"]["completion_tokens"] == 3

    after = real_llm.stats()["normal"]
    assert after["requests"] == before["requests"] + 2
    assert after["completion_tokens"] == (
        before["completion_tokens"] + usage["completion_tokens"] + 3
    )


def test_server_modes_reason_first_or_refuse_json_schema(real_llm: RealLLM) -> None:
    schema_format = {
        "type": "json_schema",
        "json_schema": {"name": "grade", "strict": True, "schema": GRADE_SCHEMA},
    }
    think = _chat(real_llm, "think", response_format=schema_format, max_tokens=80).json()
    content = think["choices"][0]["message"]["content"]
    assert content.startswith("<think>\n") and "\n</think>\n\n" in content
    assert json.loads(content.split("</think>", 1)[1])["grade"] in range(5)
    assert think["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0

    field = _chat(real_llm, "reasoning-field", response_format=schema_format, max_tokens=80)
    message = field.json()["choices"][0]["message"]
    assert message["reasoning_content"] and "<think>" not in message["content"]
    assert json.loads(message["content"])["label"] in ("right", "wrong")

    cut = _chat(real_llm, "think", response_format=schema_format, max_tokens=8).json()
    assert cut["choices"][0]["finish_reason"] == "length"
    assert "</think>" not in cut["choices"][0]["message"]["content"]

    refused = _chat(real_llm, "no-json-schema", response_format=schema_format, max_tokens=40)
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "response_format"
    json_object = _chat(
        real_llm, "no-json-schema", response_format={"type": "json_object"}, max_tokens=40
    )
    assert json_object.status_code == 200
