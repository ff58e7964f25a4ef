"""The master-key test set through ``/batch_score``: rewards above the floor, pre-check on/off.

In process (``create_app`` + ``TestClient``, Qdrant ``:memory:``), against two judges: the
offline judge (the default), and a gullible judge that gives every criterion 4 (the fake
LLM of ``tests/support/fake_llm.py``: a stand-in for the judges Zhao et al. 2025 fooled, "whatever
judge is set"). The test set is ``tests/support/master_keys.py``: ``MASTER_KEYS`` (the study's
replies and more of their kinds) and ``SHORT_ANSWERS`` (short correct answers, which must
still be judged).

Usage::

    .venv/bin/python -m bench.probes.master_keys [--smoke]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from typing import Any

from amaris.app.wiring import create_app
from amaris.settings import load_settings
from amaris.sim.judge_server import Reply
from tests.support.fake_llm import running_fake_llm
from tests.support.master_keys import MASTER_KEYS, PROMPT, REFERENCE, SHORT_ANSWERS
from tests.support.testclient import TestClient

SMOKE_KEYS = 3
SMOKE_ANSWERS = 2
"""``--smoke``: the first master keys and short answers only."""


def gullible(body: dict[str, Any]) -> Reply:
    """Every criterion of the schema's enum gets 4."""
    schema = body["response_format"]["json_schema"]["schema"]
    ids = schema["properties"]["verdicts"]["items"]["properties"]["id"]["enum"]
    return Reply(content=json.dumps({"verdicts": [{"id": i, "score": 4} for i in ids]}))


def rewards(replies: tuple[str, ...], overrides: dict[str, Any]) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="amaris-bench-mk-") as tmp:
        settings = load_settings(
            None,
            **{"memory.path": tmp, "memory.embedding_model": "hashing", **overrides},
        )
        items = [
            {"rollout": {"id": f"k{i}", "input": PROMPT, "output": r,
                         "supplemental_context": REFERENCE}}
            for i, r in enumerate(replies)
        ]  # fmt: skip
        app = create_app(settings, qdrant_location=":memory:")
        with TestClient(app, base_url="http://127.0.0.1:8002") as client:  # a Host amaris serves
            answer = client.post("/batch_score", json={"items": items})
            results: list[dict[str, Any]] = answer.json()["results"]
            return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--smoke", action="store_true", help=f"{SMOKE_KEYS} master keys, {SMOKE_ANSWERS} answers"
    )
    args = parser.parse_args(argv)
    keys = MASTER_KEYS[:SMOKE_KEYS] if args.smoke else MASTER_KEYS
    answers = SHORT_ANSWERS[:SMOKE_ANSWERS] if args.smoke else SHORT_ANSWERS
    print("| judge | pre-check | master keys above the floor (0.0) | short answers caught |")
    print("|---|---|---|---|")
    with running_fake_llm() as fake:
        fake.default = gullible
        judges = {
            "offline (default)": {},
            "gullible (every verdict 4)": {
                "client.default.base_url": fake.url,
                "client.default.api_key": "bench",
            },
        }
        for judge, base in judges.items():
            for enabled in (True, False):
                overrides = {**base, "scoring.precheck.enabled": enabled}
                found = rewards(keys, overrides)
                short = rewards(answers, overrides)
                above = sum(1 for r in found if r["score"] is None or r["score"] > 0.0)
                caught = sum(1 for r in short if (r["reason"] or "").startswith("degenerate"))
                print(
                    f"| {judge} | {'on' if enabled else 'off'} | {above}/{len(found)} "
                    f"({above / len(found):.0%}) | {caught}/{len(short)} |"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
