"""The Goodhart alarm on a simulated audit stream: how soon it fires after a training judge
turns lenient to one hack, and how often on steady streams, with the audit's tests alone and
with the swap checks (``audit.swap_checks``).

The stream is tests/support/alarm_stream.py's (two audited rollouts a step, the real
fidelity figures and the real alarm); each figure counts runs over ``--seeds`` seeds of
20 steps, the drift at step 5. Pure CPU, no server.

Usage::

    .venv/bin/python -m bench.evaluations.alarm_stream [--seeds 200] [--smoke]
"""

from __future__ import annotations

import argparse
from collections import Counter

from amaris.settings import AuditSettings
from tests.support.alarm_stream import run_stream

DRIFT = 5
NOISES = (0.02, 0.1, 0.2)
BLIND = (None, 0.0, 0.05, 0.1)
"""None: the audit's tests alone; else swap checks, a steady judge blind on this share."""
SMOKE_SEEDS = 2


def delays(seeds: int, noise: float, blind: float | None, settings: AuditSettings) -> Counter[str]:
    """First alarm at or after the drift, in steps after it ("never" without one)."""
    found: Counter[str] = Counter()
    for seed in range(seeds):
        alarms = run_stream(seed, noise, settings, drift=DRIFT, blind=blind)
        first = next((s for s, a in enumerate(alarms) if a is not None and s >= DRIFT), None)
        found["never" if first is None else str(min(first - DRIFT, 3))] += 1
    return found


def steady(
    seeds: int, noise: float, blind: float | None, settings: AuditSettings
) -> tuple[int, int, int]:
    """(alarmed steps, steps, runs without an alarm) over steady streams."""
    runs = [run_stream(seed, noise, settings, blind=blind) for seed in range(seeds)]
    fired = sum(1 for run in runs for alarm in run if alarm is not None)
    return fired, sum(len(run) for run in runs), sum(1 for run in runs if not any(run))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_SEEDS} seeds")
    args = parser.parse_args(argv)
    seeds = SMOKE_SEEDS if args.smoke else args.seeds
    settings = AuditSettings()
    print(
        "| auditor noise | swap checks (steady judge blind) | at the drift | 1 step | 2 steps "
        "| later | never | steady: alarmed steps | runs without one |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for noise in NOISES:
        for blind in BLIND:
            d = delays(seeds, noise, blind, settings)
            fired, steps, quiet = steady(seeds, noise, blind, settings)
            label = "off (audit alone)" if blind is None else f"on ({blind:.0%})"
            print(
                f"| {noise} | {label} | {d['0']} | {d['1']} | {d['2']} | {d['3']} "
                f"| {d['never']} | {fired} of {steps} | {quiet} of {seeds} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
