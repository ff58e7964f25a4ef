"""Scored share with a real small model, per structured-output mode.

Starts the real-model test server (``tests/support/real_llm.py``: SmolLM2-135M-Instruct on CPU,
``xgrammar`` constrained decoding as vLLM does; a process this script owns, on 127.0.0.1)
and, for each mode, an amaris app in this process with ``agents.default.structured_output``
set to that mode (``json_schema``, ``json_object``, ``none``; ``think:json_schema`` is the
default mode against the server's reasoning-style endpoint; ``@P`` sends
``repetition_penalty: P`` instead of the server's default, Ollama's 1.1). It scores the same ``N``
distinct rollouts through ``POST /score`` one after the other (the server decodes one
request at a time), and reports the share scored, the unscored reasons, the completion
tokens the server decoded and the wall time per rollout. The model's verdicts are noise:
this measures whether amaris gets a verdict at all.

Usage::

    .venv/bin/python -m bench.evaluations.structured_output [--rollouts 20] [--max-tokens 192]
        [--modes json_schema,json_object,none,think:json_schema] [--write]

``--write`` replaces this benchmark's section of ``docs/benchmarks.md``. ``--smoke``: one
rollout, 32 tokens, the one mode :data:`SMOKE_MODE` (every part of a mode's spelling).
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import time
from pathlib import Path
from typing import Any

from amaris.app.wiring import create_app
from amaris.settings import load_settings
from bench._common import ROOT, doc_section, markers, write_doc
from tests.support.real_llm import (
    MODEL_ID,
    RealLLM,
    default_cache_dir,
    fetch_gguf,
    running_real_llm,
    sample_rollouts,
)
from tests.support.testclient import TestClient

MARK_START, MARK_END = markers("structured_output")
SMOKE_MODE = "think:json_schema@1.0"
SMOKE_MAX_TOKENS = 32
SMOKE = {"rollouts": 1, "max_tokens": SMOKE_MAX_TOKENS, "modes": SMOKE_MODE}


def run_mode(
    server: RealLLM, spec: str, rollouts: list[dict[str, str]], max_tokens: int, folder: Path
) -> dict[str, Any]:
    """Score ``rollouts`` with one ``[server mode:]structured_output`` spec."""
    head, _, penalty = spec.partition("@")
    server_mode, _, output_mode = head.rpartition(":")
    server_mode = server_mode or "normal"
    extra = {"agents.default.extra_body": {"repetition_penalty": float(penalty)}} if penalty else {}
    settings = load_settings(
        None,
        **extra,
        **{
            "memory.path": str(folder / spec.replace(":", "-").replace("@", "-")),
            "memory.embedding_model": "hashing",
            "client.default.base_url": server.base_url(server_mode),
            "client.default.api_key": "EMPTY",
            "agents.default.model": MODEL_ID,
            "agents.default.max_tokens": max_tokens,
            "agents.default.timeout": 300.0,
            "agents.default.structured_output": output_mode,
        },
    )
    before = server.stats()[server_mode]
    reasons: collections.Counter[str] = collections.Counter()
    started = time.monotonic()
    with TestClient(
        create_app(settings, qdrant_location=":memory:"), base_url="http://127.0.0.1:8002"
    ) as client:
        for rollout in rollouts:
            response = client.post("/score", json={"rollout": rollout})
            result = response.json()
            if response.status_code != 200:
                reasons[f"HTTP {response.status_code}"] += 1
            elif result["status"] == "scored":
                reasons["scored"] += 1
            else:
                reasons[result["reason"].split(":", 1)[0]] += 1
    wall = time.monotonic() - started
    after = server.stats()[server_mode]
    return {
        "spec": spec,
        "scored": reasons.pop("scored", 0),
        "unscored": dict(reasons),
        "requests": after["requests"] - before["requests"],
        "completion_tokens": after["completion_tokens"] - before["completion_tokens"],
        "seconds": wall,
    }


def report(rows: list[dict[str, Any]], count: int, max_tokens: int) -> str:
    """The Markdown section for ``docs/benchmarks.md``."""
    lines = [
        "| mode | scored | unscored (reason: count) | judge requests | completion tokens | "
        "s per rollout |",
        "|---|---|---|---:|---:|---:|",
    ]
    for row in rows:
        unscored = ", ".join(f"{k}: {v}" for k, v in sorted(row["unscored"].items())) or "-"
        lines.append(
            f"| `{row['spec']}` | {row['scored']}/{count} ({row['scored'] / count:.0%}) | "
            f"{unscored} | {row['requests']} | {row['completion_tokens']} | "
            f"{row['seconds'] / count:.1f} |"
        )
    return doc_section(
        "structured_output",
        "Scored share with a real small model, per structured-output mode",
        f"{count} distinct rollouts per `agents.default.structured_output` mode, judged by "
        f"{MODEL_ID} on CPU behind `tests/support/real_llm.py` (decoding constrained to "
        f"`response_format` as vLLM does; `max_tokens` {max_tokens}, one corrective re-ask): "
        "`think:` is the reasoning-style endpoint, `@1.0` turns the server's repeat penalty "
        "off.",
        "\n".join(lines),
        script=__file__,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rollouts", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=192)
    parser.add_argument(
        "--modes", default="json_schema,json_object,none,think:json_schema,json_schema@1.0"
    )
    parser.add_argument(
        "--write", action="store_true", help="write the section of docs/benchmarks.md"
    )
    parser.add_argument("--smoke", action="store_true", help=f"one rollout, {SMOKE_MODE}")
    args = parser.parse_args(argv)
    if args.smoke and args.write:
        parser.error("--smoke: its figures do not go to docs/benchmarks.md")
    if args.smoke:
        vars(args).update(SMOKE)
    rollouts = sample_rollouts(args.rollouts, seed=100)
    rows = []
    with tempfile.TemporaryDirectory(prefix="amaris-bench-") as tmp:
        folder = Path(tmp)
        gguf = fetch_gguf(default_cache_dir())
        with running_real_llm(gguf, folder / "server.log") as server:
            for spec in args.modes.split(","):
                row = run_mode(server, spec, rollouts, args.max_tokens, folder)
                print(row, flush=True)
                rows.append(row)
    text = report(rows, args.rollouts, args.max_tokens)
    print(text)
    if args.write:
        write_doc(ROOT / "docs" / "benchmarks.md", text, MARK_START, MARK_END)


if __name__ == "__main__":
    main()
