"""``amaris simulate``: a simulated RL training loop against amaris
(:mod:`amaris.cli.simulate`), and the memory modes the simulator's commands compare."""

from __future__ import annotations

import argparse
from pathlib import Path

from amaris.cli.common import CONFIG, SubParsers, bounded, command

MODES: dict[str, tuple[bool, bool]] = {
    "none": (False, False),
    "static": (True, False),
    "dynamic": (False, True),
    "both": (True, True),
}
"""Memory modes of the ablation: (static memory on, dynamic memory on)."""


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is below 0")
    return value


def _share(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not in [0, 1]")
    return value


SCENARIOS = ("judge-drift", "steady", "agent-hack", "cascade")
"""Scenarios: of the training judge (docs/fidelity.md), drifting from ``--drift-step`` or
not; of a coding agent that tampers with the tests; of a cheap judge before the training
judge (docs/simulation.md)."""


SIZE = (10, 32)
"""A simulation's steps and rollouts per step unless given."""
SCENARIO_SIZES = {"cascade": (16, 64)}
"""A scenario's own, where it differs: the cascade's calibration escalates every rollout
until it holds ``scoring.cascade.min_pairs`` pairs, so its run goes well past them."""


def sized(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with ``--steps`` and ``--rollouts-per-step`` as given, else the scenario's
    size (:data:`SCENARIO_SIZES`, else :data:`SIZE`)."""
    steps, rollouts = SCENARIO_SIZES.get(args.scenario or "", SIZE)
    if args.steps is None:
        args.steps = steps
    if args.rollouts_per_step is None:
        args.rollouts_per_step = rollouts
    return args


def register(sub: SubParsers) -> None:
    """Add ``simulate``."""
    parser = command(
        sub,
        "simulate",
        "amaris.cli.simulate:simulate",
        parents=[CONFIG],
        help="simulated RL training loop against amaris; writes a report folder",
    )
    parser.add_argument(
        "--url", default=None, help="use this running server instead of starting one"
    )
    for option, what in (
        ("--port", "port of the amaris server it starts on 127.0.0.1"),
        ("--prefect-port", "port of that server's Prefect server"),
        ("--judge-port", "with --scenario: port of the simulated training judge"),
        ("--auditor-port", "with --scenario: port of the simulated audit (cascade: cheap) judge"),
    ):
        parser.add_argument(
            option, type=bounded(1, 65535), default=None, help=f"{what} (default: a free one)"
        )
    parser.add_argument(
        "--steps",
        type=bounded(1, 1000),
        default=None,
        help="training steps (default 10; with --scenario cascade 16)",
    )
    parser.add_argument(
        "--rollouts-per-step",
        type=bounded(1, 1024),
        default=None,
        help="rollouts per step (default 32; with --scenario cascade 64)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of tasks and mix (default 0)")
    parser.add_argument(
        "--group-size",
        type=bounded(1, 64),
        default=1,
        help="rollouts per prompt, a GRPO group (1-64, default 1)",
    )
    parser.add_argument(
        "--learning-rate",
        type=_non_negative,
        default=2.0,
        help="how fast the mix follows reward (default 2.0; 0: fixed mix)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("sim-report"), help="report folder (default ./sim-report)"
    )
    parser.add_argument(
        "--ablation",
        action="store_true",
        help="run once per memory mode (none, static, dynamic, both), each on a fresh "
        "server; writes OUT/ablation.json beside the report (with --scenario agent-hack: "
        "memory on, then off)",
    )
    parser.add_argument(
        "--scenario",
        choices=SCENARIOS,
        default=None,
        help="serve the scorer through the simulator's judge, audited by an honest but "
        "noisy judge (--auditor-noise): judge-drift (lenient to padding from --drift-step) "
        "or steady (no drift); writes OUT/fidelity.json. agent-hack: a coding agent's "
        "trajectories against a tests-pass verifier, tampering with the tests from some "
        "step; writes OUT/agent_hack.json. cascade: a noisy cheap judge with logprobs "
        "before the simulator's (scoring.cascade); writes OUT/cascade.json",
    )
    parser.add_argument(
        "--drift-step",
        type=bounded(1, 1000),
        default=5,
        help="with --scenario judge-drift: the first step the training judge drifts (default 5)",
    )
    parser.add_argument(
        "--auditor-noise",
        type=_share,
        default=0.1,
        help="with --scenario: share of the auditor's verdicts read the other way from the "
        "honest one, drawn per reply and criterion from --seed (default 0.1; 0: the "
        "auditor is the scorer's honest judge)",
    )
