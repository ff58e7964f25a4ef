"""Settings for tests: the data folder under a test's ``tmp_path``, the fake LLM as judge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from amaris.settings import Settings, load_settings
from tests.support.fake_llm import FakeLLM


def make_settings(tmp_path: Path, **overrides: Any) -> Settings:
    """Settings with the data folder under ``tmp_path`` and dotted-key overrides.

    Memory embeds with the hashing embedder unless a test asks for MiniLM: loading torch
    costs seconds and only the semantic-memory tests need it.
    """
    return load_settings(
        None,
        **{"memory.path": str(tmp_path / "data"), "memory.embedding_model": "hashing", **overrides},
    )


def llm_settings(tmp_path: Path, fake: FakeLLM, **overrides: Any) -> Settings:
    """Settings that judge through ``fake`` with fast retries, and no endpoint probe unless
    ``server.probe_judges_seconds`` is given (its model-list requests would count among the
    fake's: tests/api/test_judge_probe.py)."""
    settings = make_settings(
        tmp_path,
        **{
            "client.default.base_url": fake.url,
            "client.default.api_key": "test-key",
            "gateway.backoff_base_seconds": 0.01,
            "gateway.backoff_max_seconds": 0.05,
            "agents.default.timeout": 2.0,
            **overrides,
        },
    )
    if "server.probe_judges_seconds" in overrides:
        return settings
    server = settings.server.model_copy(update={"probe_judges_seconds": None})
    return settings.model_copy(update={"server": server})
