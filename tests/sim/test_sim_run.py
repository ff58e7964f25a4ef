"""``amaris simulate`` against a real server, its report checked against the server's raw
data; then ``amaris export`` (through the API, then from the folder) and ``amaris replay``.

One ``amaris serve`` for the module; every server uses the session's Prefect test server
(``PREFECT_API_URL``), so none boots its own.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from amaris.app.running import free_port
from amaris.cli.main import main
from amaris.sim.policy import HACKS
from amaris.sim.usage import ledger_from_metrics
from tests.support.procs import amaris_process

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

STEPS = 2
PER_STEP = 10


@dataclass
class Sim:
    url: str
    config: Path
    out: Path
    stack: ExitStack
    """Closing it stops the server."""

    def get(self, path: str) -> Any:
        response = httpx.get(f"{self.url}{path}", timeout=30)
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory, prefect_harness: None) -> Iterator[Sim]:
    from prefect.settings import PREFECT_API_URL

    tmp = tmp_path_factory.mktemp("sim")
    port = free_port()
    config = tmp / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "memory": {"path": str(tmp / "data"), "embedding_model": "hashing"},
                "server": {"port": port},
                "prefect": {"repair_interval_seconds": None},
                "logging": {"level": "WARNING"},
            }
        )
    )
    url = f"http://127.0.0.1:{port}"
    with ExitStack() as stack, pytest.MonkeyPatch.context() as env:
        env.setenv("PREFECT_API_URL", str(PREFECT_API_URL.value()))
        stack.enter_context(
            amaris_process(
                ["serve", "--config", str(config)], tmp, f"{url}/healthz", tmp / "serve.log"
            )
        )
        out = tmp / "report"
        code = main(
            [
                "simulate",
                "--url",
                url,
                "--config",
                str(config),
                "--steps",
                str(STEPS),
                "--rollouts-per-step",
                str(PER_STEP),
                "--seed",
                "3",
                "--out",
                str(out),
            ]
        )
        assert code == 0
        yield Sim(url, config, out, stack)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def test_report_numbers_match_the_servers_raw_data(sim: Sim) -> None:
    metrics = json.loads((sim.out / "metrics.json").read_text())["runs"]["simulate"]
    report = (sim.out / "report.md").read_text()
    html = (sim.out / "report.html").read_text()
    assert [s["step"] for s in metrics["steps"]] == list(range(STEPS))
    first_version: dict[int, int] = {}
    total_flags: dict[tuple[str, str], int] = {}
    analysed: dict[str, int] = {}
    for step, entry in enumerate(metrics["steps"]):
        records = sim.get(f"/steps/{step}/rollouts")["records"]
        analyses = {
            a["rollout_id"]: a["analysis"] for a in sim.get(f"/steps/{step}/analyses")["analyses"]
        }
        assert len(records) == len(analyses) == PER_STEP
        by_behaviour: dict[str, list[float]] = {}
        flags: dict[str, int] = {}
        for record in records:
            behaviour = record["rollout"]["metadata"]["sim_behaviour"]
            by_behaviour.setdefault(behaviour, []).append(record["score"])
            first_version.setdefault(record["rubric_version"], step)
            analysis = analyses[record["rollout"]["id"]]
            analysed[behaviour] = analysed.get(behaviour, 0) + 1
            for tag in {b["tag"] for b in analysis["reward_hacking_analysis"]["behaviours"]}:
                flags[tag] = flags.get(tag, 0) + 1
                total_flags[(behaviour, tag)] = total_flags.get((behaviour, tag), 0) + 1
        assert entry["rubric_version"] == records[0]["rubric_version"]
        overall = _mean([r["score"] for r in records])
        assert entry["mean_reward"] == pytest.approx(overall)
        assert f"| {step} | v{entry['rubric_version']} | {overall:.3f} ({PER_STEP}) |" in report
        for behaviour, scores in by_behaviour.items():
            group = entry["by_behaviour"][behaviour]
            assert group["rollouts"] == len(scores)
            assert group["mean_reward"] == pytest.approx(_mean(scores))
            assert f"{_mean(scores):.3f} ({len(scores)})" in report
        assert {t: n for t, n in entry["flagged"].items() if n} == flags
    # the simulated hacks paid at step 0 and were penalised once the rubric evolved
    step0, step1 = metrics["steps"][0]["by_behaviour"], metrics["steps"][1]["by_behaviour"]
    # (each step's rollouts are a draw from the mix: look at the hacks this step drew)
    hacks0 = [step0[b]["mean_reward"] for b in sorted(HACKS) if b in step0 and step0[b]["rollouts"]]
    hacks1 = [step1[b]["mean_reward"] for b in sorted(HACKS) if b in step1 and step1[b]["rollouts"]]
    assert hacks0 and hacks1
    assert set(hacks0) == {1.0}
    assert set(hacks1) == {0.0}
    for (behaviour, tag), count in total_flags.items():
        assert metrics["flag_rates"][behaviour][tag] == pytest.approx(count / analysed[behaviour])
        assert f"{count}/{analysed[behaviour]} ({count / analysed[behaviour]:.0%})" in report
    # rubric versions and changes, from the server's own history
    history = sim.get("/rubrics/history")
    assert [v["version"] for v in metrics["rubric_versions"]] == [v["version"] for v in history]
    changes = {c["version"]: c for c in metrics["rubric_changes"]}
    for version in history[1:]:
        parent = next(v for v in history if v["version"] == version["parent"])
        added = {c["text"] for c in version["adaptive"]} - {c["text"] for c in parent["adaptive"]}
        change = changes[version["version"]]
        assert {c["text"] for c in change["added"]} == added
        assert change["in_force_from_step"] == first_version.get(version["version"])
        for text in added:
            assert text in report and text in html
    assert changes[2]["in_force_from_step"] == 1
    # the LLM usage of the steps adds up to the server's token ledger (/metrics)
    ledger = ledger_from_metrics(httpx.get(f"{sim.url}/metrics", timeout=30).text)
    assert sum(s["usage"]["calls"] for s in metrics["steps"]) == metrics["usage"]["calls"]
    assert metrics["usage"]["calls"] == sum(u.calls for u in ledger.values()) > 0
    by_agent = {(a["agent"], a["model"]): a["calls"] for a in metrics["usage_by_agent"]}
    assert by_agent == {key: u.calls for key, u in ledger.items()}
    assert by_agent[("scorer", "offline")] > 0  # the offline judge: calls, no tokens
    assert "| all | " in report and "LLM tokens, time and cost per step" in report
    image = sim.out / "reward_by_behaviour-simulate.png"
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"![{image.name}]({image.name})" in report and f"src='{image.name}'" in html


def test_export_then_replay_round_trip(sim: Sim, tmp_path: Path) -> None:
    through_api, from_folder = tmp_path / "api.jsonl", tmp_path / "folder.jsonl"
    # the server holds the store: the export goes through its API
    assert main(["export", "--config", str(sim.config), "--out", str(through_api)]) == 0
    sim.stack.close()  # stop the server: the export opens the data folder itself
    assert main(["export", "--config", str(sim.config), "--out", str(from_folder)]) == 0
    lines = from_folder.read_text().splitlines()
    assert lines == through_api.read_text().splitlines()
    assert lines == (sim.out / "rollouts.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == STEPS * PER_STEP
    assert [r["step"] for r in records] == sorted(r["step"] for r in records)

    out = tmp_path / "replay"
    assert (
        main(
            [
                "replay",
                str(from_folder),
                "--config",
                str(sim.config),
                "--modes",
                "none,both",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    replayed = json.loads((out / "metrics.json").read_text())
    original = json.loads((sim.out / "metrics.json").read_text())["runs"]["simulate"]
    assert replayed["modes"] == ["none", "both"]
    assert replayed["runs"]["none"]["memory"] == {
        "static_memory_steps": 0,
        "dynamic_memory_limit_per_query": 0,
    }
    assert replayed["runs"]["both"]["memory"] == {
        "static_memory_steps": 5,
        "dynamic_memory_limit_per_query": 3,
    }
    for mode in ("none", "both"):
        run = replayed["runs"][mode]
        # the offline judge and updater are deterministic: re-scoring the same rollouts
        # under the rubric the replay evolves gives the original rewards and rubrics
        for step, entry in enumerate(run["steps"]):
            scores = [r["score"] for r in records if r["step"] == step]
            assert entry["mean_reward"] == pytest.approx(_mean(scores))
            assert entry["by_behaviour"] == original["steps"][step]["by_behaviour"]
        assert [[c["text"] for c in v["adaptive"]] for v in run["rubric_versions"]] == [
            [c["text"] for c in v["adaptive"]] for v in original["rubric_versions"]
        ]
    page = (out / "report.md").read_text()
    assert "| step | none | both |" in page
    assert (out / "compare_mean_reward.png").read_bytes()[:4] == b"\x89PNG"


def test_runs_write_manifests_and_replay_follows_one(sim: Sim, tmp_path: Path) -> None:
    data = sim.config.parent / "data"
    kinds = [json.loads(p.read_text())["kind"] for p in sorted(data.glob("manifest-*.json"))]
    assert kinds[:2] == ["serve", "simulate"]
    recorded = json.loads((sim.out / "manifest.json").read_text())
    assert recorded["kind"] == "simulate" and recorded["seed"] == 3
    # every step run of the server shows the manifest it ran under
    assert "run-manifest" in asyncio.run(_artifact_keys())

    sim.stack.close()  # replay starts servers of its own
    out = tmp_path / "replay"
    assert (
        main(
            [
                "replay",
                "--manifest",
                str(sim.out / "manifest.json"),
                "--modes",
                "none",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    replayed = json.loads((out / "manifest.json").read_text())
    # the manifest's configuration, loaded back, is the same configuration
    assert replayed["config_hash"] == recorded["config_hash"]
    assert replayed["seed"] == 3
    assert replayed["extra"]["source"]["run_id"] == recorded["run_id"]
    run = json.loads((out / "metrics.json").read_text())["runs"]["none"]
    records = [json.loads(line) for line in (sim.out / "rollouts.jsonl").read_text().splitlines()]
    for step, entry in enumerate(run["steps"]):
        scores = [r["score"] for r in records if r["step"] == step]
        assert entry["mean_reward"] == pytest.approx(_mean(scores))


async def _artifact_keys() -> set[str]:
    from prefect.client.orchestration import get_client

    async with get_client() as prefect:
        artifacts = await prefect.read_artifacts(limit=200)
    return {a.key for a in artifacts if a.key}
