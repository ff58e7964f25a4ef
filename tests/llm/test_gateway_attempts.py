"""The gateway's parts: what a failure means is the provider's to say
(:meth:`ChatProvider.failure`), and the LLM modules stay small and typed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel

from amaris.llm.call_log import CallLog
from amaris.llm.gateway import LLMGateway, LLMUnavailableError
from amaris.llm.providers import Completion, Failure, openai_failure
from amaris.settings import ResolvedAgentOptions, Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted([*ROOT.glob("amaris/llm/*.py"), *ROOT.glob("amaris/agents/**/*.py")])


class Answer(BaseModel):
    value: int


@dataclass
class JudgingProvider:
    """Raises each scripted error in turn, then answers; classifies failures its own way:
    ``transient`` names the error types it says are worth another attempt."""

    errors: list[BaseException]
    transient: tuple[type[BaseException], ...]
    calls: int = 0
    seen: list[BaseException] = field(default_factory=list)
    description: str = "judging"
    offline: bool = False

    async def complete(
        self,
        agent: str,
        messages: list[dict[str, str]],
        options: ResolvedAgentOptions,
        response_format: dict[str, Any] | None = None,
    ) -> Completion:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return Completion(content=json.dumps({"value": 7}), prompt_tokens=5, completion_tokens=3)

    def failure(self, exc: BaseException) -> Failure:
        self.seen.append(exc)
        return Failure("transient") if isinstance(exc, self.transient) else Failure("error")

    async def models(self, timeout: float) -> dict[str, int | None]:
        return {}

    async def close(self) -> None:
        return None


def settings(tmp_path: Path) -> Settings:
    return load_settings(
        None,
        **{
            "memory.path": str(tmp_path / "data"),
            "memory.embedding_model": "hashing",
            "gateway.max_attempts": 3,
            "gateway.backoff_base_seconds": 0.001,
            "gateway.backoff_max_seconds": 0.001,
        },
    )


def unavailable() -> openai.InternalServerError:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(503, request=request)
    return openai.InternalServerError("overloaded", response=response, body=None)


async def test_an_error_the_provider_calls_transient_is_asked_again(tmp_path: Path) -> None:
    busy = [RuntimeError("busy"), RuntimeError("busy")]
    provider = JudgingProvider(errors=busy, transient=(RuntimeError,))
    gateway = LLMGateway(settings(tmp_path), {"scorer": provider}, CallLog(None))
    answer = await gateway.structured("scorer", [{"role": "user", "content": "x"}], Answer)
    assert answer.value == 7
    assert provider.calls == 3
    assert [str(e) for e in provider.seen] == ["busy", "busy"]
    assert gateway.stats["scorer.errors"] == 2 and gateway.stats["scorer.calls"] == 1


async def test_an_error_the_provider_calls_final_is_not_asked_again(tmp_path: Path) -> None:
    # A 503 is transient to an OpenAI-compatible endpoint; this provider says otherwise.
    provider = JudgingProvider(errors=[unavailable()], transient=())
    gateway = LLMGateway(settings(tmp_path), {"scorer": provider}, CallLog(None))
    with pytest.raises(LLMUnavailableError, match="overloaded"):
        await gateway.structured("scorer", [{"role": "user", "content": "x"}], Answer)
    assert provider.calls == 1
    assert openai_failure(unavailable()) == Failure("transient")


@pytest.mark.parametrize("module", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_bare_json_object_type_says_why_its_shape_is_unknown(module: Path) -> None:
    """``dict[str, Any]`` only as a named alias with its docstring next, or with a comment
    on its line saying the shape is unknown (a JSON schema, a data block...)."""
    lines = module.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines):
        if "dict[str, Any]" not in line:
            continue
        alias = ": TypeAlias = dict[str, Any]" in line and lines[number + 1].startswith('"""')
        assert alias or "#" in line, f"{module.name}:{number + 1}: {line.strip()}"
