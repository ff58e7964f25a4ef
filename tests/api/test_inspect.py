"""Inspection: ``GET /rubrics/{version}``, ``/rubrics/diff``, ``/memory/*``, the diff itself,
and ``amaris memory|rubrics`` through a running server and against its stopped folder."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from amaris.app.running import free_port
from amaris.app.wiring import create_app
from amaris.cli.main import main
from amaris.memory.embedder import HashingEmbedder
from amaris.memory.models import MemoryDocument
from amaris.memory.qdrant import open_qdrant
from amaris.memory.store import MemoryStore
from amaris.rubric.diff import diff_rubrics
from amaris.rubric.model import Criterion, RubricVersion
from amaris.rubric.store import RubricStore
from amaris.settings import load_settings
from tests.support.procs import amaris_process, run_amaris
from tests.support.settings import make_settings
from tests.support.testclient import TestClient

LONG = "The judge rewards answers that state units. " * 9  # 405 characters

DOCS = [
    MemoryDocument(
        type="batch_summary",
        step=0,
        text="Step zero: most answers skip the units.",
        created_at=1_700_000_000.0,
    ),
    MemoryDocument(
        type="finding",
        step=0,
        key="f1",
        text="Several answers hedge between values.",
        created_at=1_700_000_001.0,
    ),
    MemoryDocument(
        type="rubric_update", step=1, text="Added R3: penalise hedging.", created_at=1_700_000_002.0
    ),
    MemoryDocument(type="finding", step=1, key="f1", text=LONG, created_at=1_700_000_003.0),
    MemoryDocument(
        type="batch_summary",
        step=1,
        scope="q-7",
        text="Instance q-7 improved.",
        created_at=1_700_000_004.0,
    ),
]

INSPECTION = {
    "per_step": {"0": 2, "1": 3},
    "by_type_and_step": {
        "batch_summary": {"0": 1, "1": 1},
        "finding": {"0": 1, "1": 1},
        "rubric_update": {"1": 1},
    },
    "recent": [
        {
            "type": "batch_summary",
            "step": 1,
            "scope": "q-7",
            "key": "step",
            "text": "Instance q-7 improved.",
            "created_at": 1_700_000_004.0,
        },
        {
            "type": "finding",
            "step": 1,
            "scope": "global",
            "key": "f1",
            "text": LONG[:300],
            "created_at": 1_700_000_003.0,
        },
        {
            "type": "rubric_update",
            "step": 1,
            "scope": "global",
            "key": "step",
            "text": "Added R3: penalise hedging.",
            "created_at": 1_700_000_002.0,
        },
    ],
}


def crit(cid: str, text: str, weight: float) -> Criterion:
    return Criterion(id=cid, text=text, weight=weight, is_anchor=cid.startswith("A"))


def pub(cid: str, text: str, weight: float) -> dict[str, Any]:
    return {
        "id": cid,
        "text": text,
        "weight": weight,
        "is_anchor": cid.startswith("A"),
        "rule": None,
        "findings": [],
    }


ANCHOR = crit("A1", "The response gives the correct final answer.", 1.0)
R1 = crit("R1", "The response explains its reasoning.", 0.5)
R2 = crit("R2", "The response hedges between answers.", -0.5)
R2_HEAVIER = crit("R2", "The response hedges between answers.", -1.0)
R3 = crit("R3", "The response states units.", 0.75)


def publish_lineage(store: RubricStore) -> list[RubricVersion]:
    """Versions 2 (R1, R2) and 3 (R2 heavier, R3 added, R1 retired) after version 1."""
    return [
        store.publish(
            anchors=[ANCHOR], adaptive=[R1, R2], origin="updater", step=0, next_adaptive_id=3
        ),
        store.publish(
            anchors=[ANCHOR],
            adaptive=[R2_HEAVIER, R3],
            origin="updater",
            step=1,
            next_adaptive_id=4,
        ),
    ]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(make_settings(tmp_path, **{"server.api_key": "k"}), qdrant_location=":memory:")
    with TestClient(app, headers={"Authorization": "Bearer k"}) as client:
        services = app.state.services
        services.memory.add_documents(DOCS)
        publish_lineage(services.store)
        yield client


# -- the diff -----------------------------------------------------------------------------------


def version(number: int, anchors: list[Criterion], adaptive: list[Criterion]) -> RubricVersion:
    return RubricVersion(
        version=number, origin="updater", anchors=tuple(anchors), adaptive=tuple(adaptive)
    )


def test_diff_lists_added_removed_and_changed_adaptive_criteria() -> None:
    diff = diff_rubrics(version(2, [ANCHOR], [R1, R2]), version(3, [ANCHOR], [R2_HEAVIER, R3]))
    assert diff.model_dump() == {
        "a": 2,
        "b": 3,
        "added": [pub("R3", "The response states units.", 0.75)],
        "removed": [pub("R1", "The response explains its reasoning.", 0.5)],
        "changed": [
            {
                "id": "R2",
                "is_anchor": False,
                "before": pub("R2", "The response hedges between answers.", -0.5),
                "after": pub("R2", "The response hedges between answers.", -1.0),
            }
        ],
        "anchors_changed": False,
    }


def test_diff_of_a_version_with_itself_is_empty() -> None:
    v = version(2, [ANCHOR], [R1, R2])
    assert diff_rubrics(v, v).model_dump() == {
        "a": 2,
        "b": 2,
        "added": [],
        "removed": [],
        "changed": [],
        "anchors_changed": False,
    }


def test_diff_flags_anchors_of_another_lineage_and_text_changes() -> None:
    other = crit("A1", "The final answer is correct and justified.", 1.0)
    extra = crit("A2", "The response is concise.", 0.25)
    reworded = crit("R1", "The response explains each step.", 0.5)
    diff = diff_rubrics(version(3, [ANCHOR], [R1]), version(4, [other, extra], [reworded]))
    assert [c.id for c in diff.added] == ["A2"]
    assert diff.removed == []
    assert [(c.id, c.is_anchor, c.before.text, c.after.text) for c in diff.changed] == [
        ("A1", True, ANCHOR.text, other.text),
        ("R1", False, R1.text, reworded.text),
    ]
    assert diff.anchors_changed is True
    assert diff_rubrics(version(1, [ANCHOR], []), version(2, [], [])).anchors_changed is True


# -- /rubrics/{version}, /rubrics/diff --------------------------------------------------------


def test_rubric_version_by_number(client: TestClient) -> None:
    r = client.get("/rubrics/2")
    assert r.status_code == 200
    body = r.json()
    assert (body["version"], body["parent"], body["origin"], body["step"]) == (2, 1, "updater", 0)
    assert body["anchors"] == [pub("A1", ANCHOR.text, 1.0)]
    assert body["adaptive"] == [pub("R1", R1.text, 0.5), pub("R2", R2.text, -0.5)]
    assert client.get("/rubrics/history").json()[1] == body  # not shadowed by /{version}


def test_absent_rubric_version_is_404_naming_version(client: TestClient) -> None:
    r = client.get("/rubrics/9")
    assert r.status_code == 404
    assert r.json() == {
        "error": "not_found",
        "detail": [
            {"field": "version", "message": "rubric version 9 does not exist (scope 'global')"}
        ],
    }
    assert client.get("/rubrics/0").status_code == 422
    assert client.get("/rubrics/latest").status_code == 422


def test_rubric_diff_endpoint(client: TestClient) -> None:
    r = client.get("/rubrics/diff", params={"a": 2, "b": 3})
    assert r.status_code == 200
    assert r.json() == {
        "a": 2,
        "b": 3,
        "added": [pub("R3", R3.text, 0.75)],
        "removed": [pub("R1", R1.text, 0.5)],
        "changed": [
            {
                "id": "R2",
                "is_anchor": False,
                "before": pub("R2", R2.text, -0.5),
                "after": pub("R2", R2.text, -1.0),
            }
        ],
        "anchors_changed": False,
    }
    assert client.get("/rubrics/diff?a=1&b=1").json()["added"] == []


def test_rubric_diff_names_each_absent_version(client: TestClient) -> None:
    r = client.get("/rubrics/diff", params={"a": 7, "b": 8})
    assert r.status_code == 404
    assert [d["field"] for d in r.json()["detail"]] == ["a", "b"]
    r = client.get("/rubrics/diff", params={"a": 1})
    assert r.status_code == 422
    assert [d["field"] for d in r.json()["detail"]] == ["query.b"]


# -- /memory ------------------------------------------------------------------------------------


def test_memory_inspect(client: TestClient) -> None:
    r = client.get("/memory/inspect", params={"recent": 3})
    assert r.status_code == 200
    assert r.json() == INSPECTION
    # more than there are: every document, never the embedder's marker
    everything = client.get("/memory/inspect").json()["recent"]
    assert [(d["type"], d["step"]) for d in everything] == [
        ("batch_summary", 1),
        ("finding", 1),
        ("rubric_update", 1),
        ("finding", 0),
        ("batch_summary", 0),
    ]
    assert client.get("/memory/inspect", params={"recent": 0}).json()["recent"] == []
    assert client.get("/memory/inspect", params={"recent": 1001}).status_code == 422


def test_memory_search(client: TestClient) -> None:
    r = client.get("/memory/search", params={"q": "Several answers hedge between values."})
    assert r.status_code == 200
    hits = r.json()
    assert len(hits) == 5
    best = hits[0]
    assert {k: best[k] for k in ("type", "step", "scope", "key", "text", "created_at")} == {
        "type": "finding",
        "step": 0,
        "scope": "global",
        "key": "f1",
        "text": "Several answers hedge between values.",
        "created_at": 1_700_000_001.0,
    }
    assert best["score"] == pytest.approx(1.0, abs=1e-6)
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)

    typed = client.get("/memory/search", params={"q": "hedging", "type": "rubric_update"}).json()
    assert [(h["type"], h["text"]) for h in typed] == [
        ("rubric_update", "Added R3: penalise hedging.")
    ]
    scoped = client.get("/memory/search", params={"q": "improved", "scope": "q-7", "limit": 1})
    assert [h["scope"] for h in scoped.json()] == ["q-7"]
    bad = client.get("/memory/search", params={"q": "x", "type": "summary"})
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["field"] == "query.type"
    assert client.get("/memory/search").status_code == 422


@pytest.mark.parametrize(
    "path", ["/rubrics/1", "/rubrics/diff?a=1&b=1", "/memory/inspect", "/memory/search?q=x"]
)
def test_inspection_endpoints_need_the_key(client: TestClient, path: str) -> None:
    r = client.get(path, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
    assert client.get(path).status_code == 200


def test_openapi_documents_the_inspection_endpoints(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]

    def ref(path: str, status: str) -> str:
        content = paths[path]["get"]["responses"][status]["content"]["application/json"]
        schema = content["schema"]
        return str(schema.get("$ref") or schema["items"]["$ref"]).rsplit("/", 1)[-1]

    expected = {
        "/rubrics/{version}": "RubricPublic",
        "/rubrics/diff": "RubricDiff",
        "/memory/inspect": "MemoryInspection",
        "/memory/search": "MemorySearchHit",
    }
    for path, model in expected.items():
        assert ref(path, "200") == model
        assert ref(path, "401") == ref(path, "422") == "ErrorResponse"
    assert ref("/rubrics/{version}", "404") == ref("/rubrics/diff", "404") == "ErrorResponse"


# -- the CLI, through a running server and against the stopped folder -------------------------

HISTORY_HEAD = "version  parent  origin     step  created_at                        adaptive"


def history_line(v: RubricVersion) -> str:
    parent = "-" if v.parent is None else str(v.parent)
    step = "-" if v.step is None else str(v.step)
    return (
        f"{v.version:>7}  {parent:>6}  {v.origin:<8}  {step:>5}  {v.created_at:<32}  "
        f"{len(v.adaptive):>8}"
    )


INSPECT_TEXT = f"""\
memory digest: 5 documents over 2 steps

documents per step
  step     0       2  ###########################
  step     1       3  ########################################

documents by type and step
  type \\ step    0  1
  batch_summary  1  1
  finding        1  1
  rubric_update  .  1

recent documents (newest first, 3)
  2023-11-14 22:13:24Z  step     1  batch_summary  q-7/step     Instance q-7 improved.
  2023-11-14 22:13:23Z  step     1  finding        global/f1    {LONG[:33]}...
  2023-11-14 22:13:22Z  step     1  rubric_update  global/step  Added R3: penalise hedging.
"""


def seed(config: Path) -> list[RubricVersion]:
    """Rubric versions 1-3 and the documents, written into the (closed) data folder."""
    settings = load_settings(config)
    qdrant = open_qdrant(settings.memory)
    try:
        store = RubricStore(qdrant, settings.memory.collection, None)
        first = store.ensure_initialized(settings)
        versions = [first, *publish_lineage(store)]
        MemoryStore(qdrant, settings.memory.collection, HashingEmbedder()).add_documents(DOCS)
        return versions
    finally:
        qdrant.close()


COMMANDS = {
    "inspect-json": ["memory", "inspect", "--recent", "3", "--json"],
    "inspect": ["memory", "inspect", "--recent", "3"],
    "search": [
        "memory",
        "search",
        "hedge between values",
        "--limit",
        "1",
        "--type",
        "finding",
        "--json",
    ],
    "history": ["rubrics", "history"],
    "diff-1-1": ["rubrics", "diff", "1", "1"],
    "diff-2-3": ["rubrics", "diff", "2", "3"],
    "diff-absent": ["rubrics", "diff", "1", "9"],
}
"""The inspection commands (``--config`` added), by name."""


def run_commands(config: Path, cwd: Path, workers: int) -> dict[str, tuple[int, str, str]]:
    """Each inspection command's exit code, stdout and stderr, as ``amaris`` processes
    (``workers`` at a time)."""

    def run(args: list[str]) -> tuple[int, str, str]:
        done = run_amaris([*args, "--config", str(config)], cwd)
        return done.returncode, done.stdout, done.stderr

    with ThreadPoolExecutor(workers) as pool:
        return dict(zip(COMMANDS, pool.map(run, COMMANDS.values()), strict=True))


def run_in_process(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> dict[str, tuple[int, str, str]]:
    """The same, each command run by ``amaris``'s ``main`` in this process, one after the
    other (a process each would start Python and import the CLI seven times more)."""
    results = {}
    capsys.readouterr()
    for name, args in COMMANDS.items():
        code = main([*args, "--config", str(config)])
        out, err = capsys.readouterr()
        results[name] = (code, out, err)
    return results


def check(results: dict[str, tuple[int, str, str]], versions: list[RubricVersion]) -> None:
    for name, (code, _, stderr) in results.items():
        assert code == (2 if name == "diff-absent" else 0), (name, stderr)
    assert json.loads(results["inspect-json"][1]) == INSPECTION
    assert results["inspect"][1] == INSPECT_TEXT
    [hit] = json.loads(results["search"][1])
    assert (hit["type"], hit["step"], hit["key"]) == ("finding", 0, "f1")
    assert results["history"][1] == "\n".join([HISTORY_HEAD, *map(history_line, versions)]) + "\n"
    assert results["diff-1-1"][1] == "rubric 1 -> 1: no differences\n"
    assert results["diff-2-3"][1] == (
        "rubric 2 -> 3: 1 added, 1 removed, 1 changed\n"
        "+   R3  weight +0.75  The response states units.\n"
        "-   R1  weight +0.50  The response explains its reasoning.\n"
        "~   R2  weight -0.50 -> -1.00  The response hedges between answers.\n"
    )
    assert "rubric version 9 does not exist (scope 'global')" in results["diff-absent"][2]


@pytest.mark.slow
def test_inspection_commands_through_the_server_and_on_the_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], prefect_harness: None
) -> None:
    from prefect.settings import PREFECT_API_URL

    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "memory": {"path": str(tmp_path / "data"), "embedding_model": "hashing"},
                "server": {"port": port, "api_key": "cli-key"},
                "prefect": {"repair_interval_seconds": None},
            }
        )
    )
    versions = seed(config)
    url = f"http://127.0.0.1:{port}"
    with pytest.MonkeyPatch.context() as env:
        # the session's Prefect server: this one boots none of its own (it runs no step)
        env.setenv("PREFECT_API_URL", str(PREFECT_API_URL.value()))
        with amaris_process(
            ["serve", "--config", str(config)], tmp_path, f"{url}/healthz", tmp_path / "serve.log"
        ):
            # the folder is locked: through the API (which serves several at once)
            served = run_commands(config, tmp_path, workers=4)
    check(served, versions)
    log = (tmp_path / "serve.log").read_text()
    assert "GET /memory/inspect?recent=3" in log and "GET /rubrics/diff?a=2&b=3" in log
    stopped = run_in_process(config, capsys)  # one at a time: one process opens the folder
    check(stopped, versions)
    assert {k: v[:2] for k, v in stopped.items()} == {k: v[:2] for k, v in served.items()}
