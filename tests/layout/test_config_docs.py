"""docs/configuration.md documents every settings field, by its dotted key."""

from __future__ import annotations

import re
from pathlib import Path

from amaris.settings import AGENTS, AUDITOR, CHEAP_SCORER, Settings
from tests.support.settings_keys import dotted_keys

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def settings_keys() -> set[str]:
    """The settings' keys, per-agent sections (``default``, the six agents, the auditor and
    the cheap scorer) as ``<agent>``."""
    return dotted_keys(Settings, agents=AGENTS, also=("default", AUDITOR, CHEAP_SCORER))


def test_the_walk_finds_nested_and_per_agent_keys() -> None:
    keys = settings_keys()
    assert {
        "server.api_key",
        "client.<agent>.base_url",
        "agents.<agent>.model",
        "concurrency.<agent>",
        "pricing.<model>.prompt",
        "anchor_rubrics[].text",
        "memory.rollout_retention_steps",
    } <= keys
    assert not any("scorer" in key for key in keys)


def test_every_settings_field_is_documented() -> None:
    documented = set(re.findall(r"`([^`\s]+)`", DOC.read_text(encoding="utf-8")))
    missing = sorted(settings_keys() - documented)
    assert missing == [], f"{len(missing)} keys not in docs/configuration.md: {missing}"
