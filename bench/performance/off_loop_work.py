"""The text work of one ``/score`` by rollout size: what runs on the event loop and what in a
thread (``amaris/text/offload.py``).

For every degenerate family (``tests/support/degenerate.py``) in ``output``, at each size:
the thread CPU time (median of ``--repeat``) of the pre-check (``degenerate``), an ``exact`` rule
(``rule_results``), the scorer's messages (``judge_messages``) and the offline judge
(``respond``, with the length of its non-system messages); the worst family is reported. The
bounds: ``OFF_LOOP_CHARS`` (rollout text) for the first three, ``OFFLINE_ON_LOOP_CHARS``
(non-system message characters) for the offline judge.

Usage::

    .venv/bin/python -m bench.performance.off_loop_work [--repeat 21] [--smoke]

Another tree's code: ``PYTHONPATH=<tree>:. .venv/bin/python -P -m bench.performance.off_loop_work``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from amaris.agents.prompts import load_prompts
from amaris.llm.providers import OFFLINE_ON_LOOP_CHARS
from amaris.models import ScoreRequest
from amaris.offline.judge import respond
from amaris.rubric.model import Criterion, RubricVersion
from amaris.scoring.judge_protocol import judge_messages
from amaris.scoring.rules import rule_results
from amaris.settings import ExactRule, load_settings
from amaris.text.offload import OFF_LOOP_CHARS
from amaris.trust.precheck import degenerate
from tests.support.degenerate import FAMILIES, QUESTION, REFERENCE

SIZES = (64, 128, 256, 512, 4_096, 100_000)
SMOKE_SIZES = (64,)
RUBRIC = RubricVersion(
    version=1,
    origin="config",
    anchors=(
        Criterion(id="A1", text="The final answer is correct.", weight=1.0, is_anchor=True),
        Criterion(
            id="A2",
            text="Equals the reference.",
            weight=0.5,
            is_anchor=True,
            rule=ExactRule(kind="exact"),
        ),
    ),
)


def cpu_ms(func: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.thread_time()
        func()
        times.append((time.thread_time() - start) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--smoke", action="store_true", help="64 characters, one call each")
    args = parser.parse_args(argv)
    repeat, sizes = (1, SMOKE_SIZES) if args.smoke else (args.repeat, SIZES)
    prompt = load_prompts(load_settings(None).prompts)["scorer"]
    print(f"OFF_LOOP_CHARS={OFF_LOOP_CHARS}, OFFLINE_ON_LOOP_CHARS={OFFLINE_ON_LOOP_CHARS}\n")
    print(
        "| reply chars | pre-check | exact rule | scorer messages | offline judge (message chars) |"
    )
    print("|---:|---:|---:|---:|---:|")
    for size in sizes:
        worst: dict[str, tuple[float, str]] = {}
        for family, build in sorted(FAMILIES.items()):
            output = build(size)
            fields = {"input": QUESTION, "output": output, "supplemental_context": REFERENCE}
            request = ScoreRequest.model_validate({"rollout": {"id": "b", **fields}})
            messages = judge_messages(prompt, RUBRIC, fields)
            chars = sum(len(m["content"]) for m in messages if m["role"] != "system")
            work: dict[str, Callable[[], object]] = {
                "precheck": partial(degenerate, output, QUESTION, REFERENCE),
                "rule": partial(rule_results, RUBRIC.criteria, request.rollout),
                "messages": partial(judge_messages, prompt, RUBRIC, fields),
                "judge": partial(respond, messages),
            }
            for name, func in work.items():
                ms = cpu_ms(func, repeat)
                label = f"{family}, {chars}" if name == "judge" else family
                worst[name] = max(worst.get(name, (0.0, "")), (ms, label))
        cells = [
            f"{worst[n][0]:.2f} ms ({worst[n][1]})"
            for n in ("precheck", "rule", "messages", "judge")
        ]
        print(f"| {size:,} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
