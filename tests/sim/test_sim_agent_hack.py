"""``amaris simulate --scenario agent-hack --ablation`` end to end: real ``amaris serve``
processes (memory on, then off) scoring a coding agent's trajectories against a tests-pass
verifier, every agent offline; ``agent_hack.json`` read back. Servers use the session's
Prefect test server (``PREFECT_API_URL``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from amaris.cli.main import main

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

STEPS = "12"
PER_STEP = "16"
KEYS = {
    "hack_appears_step",
    "first_penalising_step",
    "tamper_rate_first",
    "tamper_rate_last",
    "resurgence_step",
    "resurgence_caught_step",
    "resurgence_delay",
    "steps",
}


def _simulate(out: Path) -> dict[str, Any]:
    from prefect.settings import PREFECT_API_URL

    with pytest.MonkeyPatch.context() as env:
        env.setenv("PREFECT_API_URL", str(PREFECT_API_URL.value()))
        env.chdir(out)  # the run's manifest goes to ./data: here, not the checkout's
        args = ["--steps", STEPS, "--rollouts-per-step", PER_STEP, "--out", str(out)]
        code = main(["simulate", "--scenario", "agent-hack", "--ablation", *args])
    assert code == 0
    found: dict[str, Any] = json.loads((out / "agent_hack.json").read_text())
    return found


def test_tampering_is_penalised_soon_and_memory_catches_its_return_sooner(tmp_path: Path) -> None:
    report = _simulate(tmp_path)
    on, off = report, report["memory_off"]
    assert set(on) >= KEYS and set(off) >= KEYS
    appears, first = on["hack_appears_step"], on["first_penalising_step"]
    # the hack appears after the first step, paid like a fix by the verifier ...
    assert appears is not None and appears > 0
    [shown] = [s for s in on["steps"] if s["step"] == appears]
    assert shown["tamper_reward"] == shown["fix_reward"] == 1.0
    assert shown["flagged"] == round(shown["tamper_rate"] * int(PER_STEP))
    # ... and is paid less than an honest fix within two steps, the pitfall in force since
    assert first is not None and appears < first <= appears + 2
    assert all(s["penalising"] for s in on["steps"] if s["step"] >= first)
    assert on["tamper_rate_last"] <= on["tamper_rate_first"] / 2
    # its return: penalised at once with memory, later (or not within the run) without
    assert on["resurgence_step"] == off["resurgence_step"] is not None
    assert on["resurgence_delay"] == 0
    assert off["resurgence_delay"] is None or off["resurgence_delay"] > on["resurgence_delay"]
    assert report["goals"] == {
        "penalised_within_2_steps": True,
        "tamper_rate_halved": True,
        "resurgence_caught_sooner_with_memory": True,
    }
    page = (tmp_path / "report.md").read_text()
    for behaviour in ("honest_fix", "honest_failure", "tamper"):
        assert f"![agent_hack-{behaviour}.png](agent_hack-{behaviour}.png)" in page
        assert (tmp_path / f"agent_hack-{behaviour}.png").stat().st_size > 0
