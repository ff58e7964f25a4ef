"""Learned pre-check rules: the pre-check's CPU per reply with and
without learned rules in force, and the CPU of mining judge canary probes from one reply.

1. The pre-check (:func:`amaris.trust.precheck.degenerate`) on replies of 1 KB, 10 KB and
   100 KB (a repeated opener then the answer; digits separated by spaces), the prompt 1.5 KB,
   with no rules and with ``--rules`` rules (a mix of any-prompt and one-prompt rules) in a
   real store (Qdrant ``:memory:``): the median CPU time per call over ``--repeat`` calls.
2. Mining (:func:`amaris.trust.judge_canaries.mine`), each kind, on 20 KB replies (the
   largest mined): the median CPU time per call.

Usage::

    .venv/bin/python -m bench.probes.learned_rules [--rules 1000] [--repeat 20] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial

from qdrant_client import QdrantClient

from amaris.trust.judge_canaries import CanarySource, mine
from amaris.trust.learned_rules import LearnedRules, new_rule
from amaris.trust.precheck import degenerate
from amaris.trust.rule_store import PrecheckRuleStore, ProbeKind

KINDS: tuple[ProbeKind, ...] = ("opener", "no_answer", "half", "swapped")
SIZES = (1_000, 10_000, 100_000)
MINED = 20_000
"""The largest reply mined."""
SMOKE = {"rules": 2, "repeat": 1, "sizes": (1_000,), "mined": 1_000}


def cpu_ms(call: Callable[[], object], repeat: int) -> float:
    """Median CPU milliseconds of ``call``."""
    times = []
    for _ in range(repeat):
        start = time.process_time()
        call()
        times.append((time.process_time() - start) * 1000)
    return statistics.median(times)


def replies(size: int) -> dict[str, str]:
    return {
        "opener": ("Let's think step by step. " * (size // 26 + 1))[:size] + " The answer is 42.",
        "digits": ("7 " * (size // 2 + 1))[:size] + " So the answer is 21.",
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rules", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="2 rules, 1 KB replies, one call")
    args = parser.parse_args(argv)
    args.sizes, args.mined = SIZES, MINED
    if args.smoke:
        vars(args).update(SMOKE)
    store = PrecheckRuleStore(QdrantClient(location=":memory:"), "bench")
    for i in range(args.rules):
        kind: ProbeKind = "opener" if i % 2 else "half"
        store.add(
            new_rule(
                kind=kind,
                text=f"I am sure of rule {i}." if kind == "opener" else f"Half of reply {i}",
                prompt=f"Prompt {i}",
                step=1,
                scope="global",
                rollout_id=f"r{i}",
                reward=1.0,
            )
        )
    match = LearnedRules(store).match
    prompt = "What is 3 * 7? Show your reasoning. " * 40
    print(f"pre-check, median CPU ms per reply ({len(store.index())} rules in force):")
    print("| reply | size | no rules | with rules |")
    print("|---|---|---|---|")
    for size in args.sizes:
        for name, text in replies(size).items():
            bare = cpu_ms(partial(degenerate, text, prompt), args.repeat)
            ruled = cpu_ms(partial(degenerate, text, prompt, None, match), args.repeat)
            print(f"| {name} | {size // 1000} KB | {bare:.2f} | {ruled:.2f} |")
    print(f"\nmining, median CPU ms per {args.mined // 1000} KB reply:")
    print("| reply | " + " | ".join(KINDS) + " |")
    print("|---|" + "---|" * len(KINDS))
    for name, text in replies(args.mined).items():
        source = CanarySource(
            id="r",
            scope="global",
            input="What is 3 * 7?",
            output=text[: args.mined],
            supplemental_context="Answer: 21",
            rubric_version=1,
            reward=1.0,
        )
        cells = [f"{cpu_ms(partial(mine, k, source), args.repeat):.1f}" for k in KINDS]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
