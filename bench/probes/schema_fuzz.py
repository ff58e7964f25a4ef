"""Schema fuzzing of a live ``amaris serve``: every operation of its OpenAPI schema, with
data that fits the schema and data that does not (schemathesis), through real HTTP.

For every case it records the status, and for every answer that is not a 2xx whether the
service's state changed: steps and their status, rollouts logged per step, rubric versions.
A refused request must change nothing. Calls have a client timeout
(``--client-timeout``), so a long poll that never answers (``/rubric_status/wait``) counts
as ``hung`` instead of stalling the run. After a 2xx that started a step, the run waits for
the step to finish before it takes the next state, so a pipeline finishing is not counted
against a later refusal. Target: no 5xx, no refused request that changed state, no call
left without an answer.

Run (schemathesis is not a dependency of amaris; install it beside it):

    .venv/bin/pip install schemathesis
    .venv/bin/python -m bench.probes.schema_fuzz [--examples 40] [--write] [--smoke]

``--write`` replaces this benchmark's section of docs/benchmarks.md. ``--smoke``: one case per
operation and mode.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import schemathesis  # type: ignore[import-not-found, unused-ignore]
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.generation.modes import (  # type: ignore[import-not-found, unused-ignore]
    GenerationMode,
)

from bench._common import (
    ROOT,
    doc_section,
    markers,
    running_stack,
    work_folder,
    write_doc,
)

KEY = "fuzz-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
NAME = "schema_fuzz"


def snapshot(session: requests.Session, url: str) -> dict[str, Any]:
    """What a refused request must not change: steps, rollouts per step, rubric versions."""
    steps = session.get(f"{url}/steps", headers=AUTH, timeout=30).json()
    history = session.get(f"{url}/rubrics/history", headers=AUTH, timeout=30).json()
    rollouts: dict[int, Any] = {}
    for entry in steps:
        answer = session.get(f"{url}/steps/{entry['step']}/rollouts", headers=AUTH, timeout=30)
        rollouts[entry["step"]] = (
            len(answer.json()["records"])
            if answer.status_code == 200
            else f"HTTP {answer.status_code}"
        )
    return {
        "steps": {e["step"]: e["status"] for e in steps},
        "rollouts": rollouts,
        "rubric_versions": len(history),
    }


def settle(session: requests.Session, url: str, limit_s: float = 120.0) -> None:
    """Wait until no step is completing (a started pipeline has finished)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        steps = session.get(f"{url}/steps", headers=AUTH, timeout=30).json()
        if not any(s["status"] == "completing" for s in steps):
            return
        time.sleep(0.5)


@dataclass
class Probe:
    """The live service and what the cases found so far."""

    url: str
    client_timeout: float
    session: requests.Session = field(default_factory=requests.Session)
    state: dict[str, Any] = field(default_factory=dict)
    changes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def one_case(probe: Probe, label: str, counts: collections.Counter[str], case: Any) -> None:
    """Send one case; count its answer; check that a refusal changed no state."""
    counts["cases"] += 1
    try:
        response = case.call(
            base_url=probe.url, session=probe.session, headers=AUTH, timeout=probe.client_timeout
        )
    except requests.Timeout:
        counts["hung"] += 1
        return
    except requests.RequestException as exc:
        counts["transport_error"] += 1
        probe.errors.append(f"{label}: {type(exc).__name__}")
        return
    status = response.status_code
    counts[f"{status // 100}xx"] += 1
    if status >= 500:
        probe.errors.append(f"{label} {status}: {response.text[:200]}")
    if 200 <= status < 300:
        settle(probe.session, probe.url)
        probe.state = snapshot(probe.session, probe.url)
        return
    after = snapshot(probe.session, probe.url)
    if after != probe.state:
        probe.changes.append(
            f"{label} {status} changed state: "
            f"{json.dumps(probe.state)[:300]} -> {json.dumps(after)[:300]}"
        )
        probe.state = after


def case_runner(
    probe: Probe, label: str, counts: collections.Counter[str]
) -> Callable[[Any], None]:
    """A test function for hypothesis's ``given`` (it inspects the signature: no partial)."""

    def run(case: Any) -> None:
        one_case(probe, label, counts, case)

    return run


def fuzz(url: str, examples: int, client_timeout: float) -> dict[str, Any]:
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", headers=AUTH, timeout=30)
    probe = Probe(url, client_timeout)
    probe.state = snapshot(probe.session, url)
    per_op: dict[str, collections.Counter[str]] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        label = f"{operation.method.upper()} {operation.path}"
        counts = per_op.setdefault(label, collections.Counter())
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            run = given(case=operation.as_strategy(generation_mode=mode))(
                case_runner(probe, label, counts)
            )
            with contextlib.suppress(Unsatisfiable):  # no invalid form: an input-less route
                settings(
                    max_examples=examples,
                    deadline=None,
                    database=None,
                    derandomize=True,
                    suppress_health_check=list(HealthCheck),
                    phases=[Phase.generate],
                )(run)()
    totals: collections.Counter[str] = collections.Counter()
    for counts in per_op.values():
        totals.update(counts)
    return {
        "per_operation": {k: dict(v) for k, v in per_op.items()},
        "totals": dict(totals),
        "state_changes": probe.changes,
        "errors": probe.errors,
        "final_state": probe.state,
    }


def steps_text(state: dict[str, Any]) -> str:
    steps = sorted(state["steps"], key=int)
    return f"{len(steps)} ({', '.join(map(str, steps[:8]))}{' ...' if len(steps) > 8 else ''})"


def operations_table(result: dict[str, Any]) -> str:
    """One row per operation, and the first answers that broke a rule (printed)."""
    lines = [
        "| operation | cases | 2xx | 4xx | 5xx | hung |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, counts in sorted(result["per_operation"].items()):
        lines.append(
            f"| `{label}` | {counts.get('cases', 0)} | {counts.get('2xx', 0)} | "
            f"{counts.get('4xx', 0)} | {counts.get('5xx', 0)} | "
            f"{counts.get('hung', 0)} |"
        )
    for title, items in (
        ("5xx answers", result["errors"]),
        ("State changed by a refused request", result["state_changes"]),
    ):
        if items:
            lines += ["", f"{title} (first 10):", ""]
            lines += [f"- `{item[:240]}`" for item in items[:10]]
    return "\n".join(lines)


def report(result: dict[str, Any], examples: int, client_timeout: float) -> str:
    totals = result["totals"]
    errors, hung = totals.get("5xx", 0), totals.get("hung", 0)
    changes = len(result["state_changes"])
    table = [
        "| operations | cases | 2xx | 4xx | 5xx | hung | refused requests that changed state "
        "| steps known at the end |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
        f"| {len(result['per_operation'])} | {totals.get('cases', 0)} | {totals.get('2xx', 0)} "
        f"| {totals.get('4xx', 0)} | {errors} | {hung} | {changes} "
        f"| {steps_text(result['final_state'])} |",
    ]
    return doc_section(
        NAME,
        "Schema fuzzing (every operation, positive and negative cases)",
        f"schemathesis sends {examples} cases per operation and mode (data that fits the "
        "OpenAPI schema and data that does not) to a live `amaris serve` with its bearer key; "
        "after each refusal the service's state (steps, rollouts, rubric versions) is compared; "
        f"a call without an answer within {client_timeout:g} s counts as hung.",
        "\n".join(table),
        script=__file__,
        targets=[
            (
                "no 5xx, no state changed by a refused request, no hung request",
                f"{errors} / {changes} / {hung}",
                "PASS" if errors == changes == hung == 0 else "FAIL",
            )
        ],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=40)
    parser.add_argument("--client-timeout", type=float, default=10.0)
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--keep", type=Path, default=None, help="keep the work folder here")
    parser.add_argument("--smoke", action="store_true", help="one case per operation and mode")
    args = parser.parse_args(argv)
    if args.smoke and args.write:
        parser.error("--smoke: its figures do not go to docs/benchmarks.md")
    if args.smoke:
        args.examples = 1
    with (
        work_folder("amaris-fuzz-", args.keep) as workdir,
        running_stack(
            0, workdir, {"server": {"api_key": KEY}, "pipeline": {"rollouts_per_step": None}}
        ) as stack,
    ):
        result = fuzz(stack.amaris_url, args.examples, args.client_timeout)
    text = report(result, args.examples, args.client_timeout)
    print(operations_table(result))
    print(text)
    if args.write:
        start, end = markers(NAME)
        write_doc(ROOT / "docs" / "benchmarks.md", text, start, end)
    return 0


if __name__ == "__main__":
    sys.exit(main())
