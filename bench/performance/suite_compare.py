"""Where the test suite's time went between two trees: pytest's per-test durations compared.

    .venv/bin/python -m bench.performance.suite_compare OLD NEW [--top N] [--smoke]

OLD and NEW are the captured output of ``pytest --durations=0``, one per tree, made with:

    git clone -q . /tmp/old && git -C /tmp/old checkout -q REV
    cd /tmp/old && python3 -m venv .venv && .venv/bin/pip install -q -c constraints.txt -e ".[dev]"
    .venv/bin/python -m pytest --durations=0 > /tmp/old.txt 2>&1    # likewise here > /tmp/new.txt

Prints markdown: each run's pytest summary (tests passed, wall seconds) and the summed time
of its tests (call + setup + teardown per test id); the tests matched between the runs by
their name without the file path (the part after the first ``::``, parameters included, a
test may move between folders), only names unique within each run; their summed time in
each run and its change; the tests found in one run only, by top-level folder; and the
``--top`` matched tests whose time grew most. pytest hides the phases under 0.005 s, so a
test whose phases all ran faster than that is absent from its run's list. Other lines (the
progress dots, warnings, ``/usr/bin/time -v``'s report) are skipped.

``--smoke``: two small durations files written to a temporary folder, compared.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

PHASES = frozenset({"call", "setup", "teardown"})
SUMMARY = re.compile(r"^=*\s*(\d+ [a-z]+(?:, \d+ [a-z]+)*) in (\d+(?:\.\d+)?)s\b")
"""pytest's final line, e.g. ``2611 passed, 53 warnings in 418.83s (0:06:58)``."""

SMOKE_OLD = """\
........                                                                 [100%]
============================== slowest durations ===============================
3.00s call     tests/app/test_cli.py::test_serve[fast]
0.50s setup    tests/app/test_cli.py::test_serve[fast]
2.00s call     tests/unit/test_steps.py::test_step_moves
1.00s call     tests/app/test_a.py::test_twin
1.50s call     tests/app/test_b.py::test_twin
0.25s call     tests/app/test_gone.py::test_removed
(12 durations < 0.005s hidden.  Use -vv to show these durations.)
6 passed, 1 warning in 9.50s (0:00:09)
	Command being timed: "python3 -m pytest --durations=0 -q"
"""
SMOKE_NEW = """\
0.20s teardown tests/app/test_cli.py::test_serve[fast]
4.00s call     tests/app/test_cli.py::test_serve[fast]
1.00s call     tests/pipeline/test_steps.py::test_step_moves
2.00s call     tests/app/test_a.py::test_twin
0.75s call     tests/bench/test_new.py::test_added
0.50s setup    tests/bench/test_new.py::test_added
1.25s call     tests/trust/test_more.py::test_other
7 passed in 12.25s (0:00:12)
"""


@dataclass(frozen=True)
class Run:
    """One ``pytest --durations=0`` output: its summary line's counts and wall seconds, and
    the summed seconds of each test id listed."""

    counts: str | None
    passed: int | None
    wall_s: float | None
    seconds: dict[str, float]

    @property
    def total_s(self) -> float:
        return sum(self.seconds.values())


def duration(line: str) -> tuple[str, float] | None:
    """``(test id, seconds)`` of a durations line (``0.12s call     tests/x.py::test_y``)."""
    parts = line.split(None, 2)
    if len(parts) < 3 or parts[1] not in PHASES or not parts[0].endswith("s"):
        return None
    try:
        seconds = float(parts[0][:-1])
    except ValueError:
        return None
    test = parts[2].strip()
    return (test, seconds) if "::" in test else None


def parse(text: str) -> Run:
    """The durations and the last summary line of one run's output."""
    seconds: dict[str, float] = {}
    summary: re.Match[str] | None = None
    for line in text.splitlines():
        found = duration(line)
        if found is not None:
            seconds[found[0]] = seconds.get(found[0], 0.0) + found[1]
        elif (match := SUMMARY.match(line.strip())) is not None:
            summary = match
    if summary is None:
        return Run(None, None, None, seconds)
    counts = summary.group(1)
    kinds = {kind: int(n) for n, kind in (part.split(" ", 1) for part in counts.split(", "))}
    return Run(counts, kinds.get("passed", 0), float(summary.group(2)), seconds)


def name(test: str) -> str:
    """A test id without its file: the part after the first ``::``."""
    return test.partition("::")[2]


def folder(test: str) -> str:
    """A test's top-level folder: the first two folders of its file (``tests/bench``)."""
    return "/".join(test.partition("::")[0].split("/")[:-1][:2]) or "."


def unique(run: Run) -> dict[str, str]:
    """Test id by name, for the names a single test id of ``run`` holds."""
    counts = Counter(name(test) for test in run.seconds)
    return {name(test): test for test in run.seconds if counts[name(test)] == 1}


def change(old: float, new: float) -> str:
    return f"{(new - old) / old * 100:+.1f} %" if old else "n/a"


def cell(text: str) -> str:
    """``text`` as a markdown table cell: in backticks, its pipes escaped."""
    return "`" + text.replace("|", "\\|") + "`"


@dataclass(frozen=True)
class Comparison:
    """Two runs' tests split by name: matched, in one run only, and left unmatched."""

    matched: dict[str, tuple[str, str]]
    """(old id, new id) by name, for the names unique within each run."""
    only_old: list[str]
    only_new: list[str]
    unmatched_old: list[str]
    unmatched_new: list[str]
    """Ids whose name is in both runs but held by more than one id in a run."""


def compare(old: Run, new: Run) -> Comparison:
    old_unique, new_unique = unique(old), unique(new)
    matched = {key: (old_unique[key], new_unique[key]) for key in old_unique if key in new_unique}
    old_names = {name(test) for test in old.seconds}
    new_names = {name(test) for test in new.seconds}
    return Comparison(
        matched=matched,
        only_old=[test for test in old.seconds if name(test) not in new_names],
        only_new=[test for test in new.seconds if name(test) not in old_names],
        unmatched_old=[
            test for test in old.seconds if name(test) in new_names and name(test) not in matched
        ],
        unmatched_new=[
            test for test in new.seconds if name(test) in old_names and name(test) not in matched
        ],
    )


def runs_table(labels: tuple[str, str], runs: tuple[Run, Run]) -> list[str]:
    lines = [
        "| run | pytest summary | passed | wall s | tests listed | summed test time s |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for label, run in zip(labels, runs, strict=True):
        wall = f"{run.wall_s:.2f}" if run.wall_s is not None else "-"
        lines.append(
            f"| {label} | {run.counts or 'no summary line'} | "
            f"{run.passed if run.passed is not None else '-'} | {wall} | "
            f"{len(run.seconds)} | {run.total_s:.2f} |"
        )
    old, new = runs
    if old.wall_s and new.wall_s:
        lines.append(
            f"\nWall time {change(old.wall_s, new.wall_s)}, "
            f"summed test time {change(old.total_s, new.total_s)}."
        )
    return lines


def folders_table(run: Run, tests: list[str]) -> list[str]:
    """Tests and their summed seconds by top-level folder, largest first."""
    count: Counter[str] = Counter()
    seconds: dict[str, float] = {}
    for test in tests:
        count[folder(test)] += 1
        seconds[folder(test)] = seconds.get(folder(test), 0.0) + run.seconds[test]
    order = sorted(seconds, key=lambda key: (-seconds[key], key))
    return [
        "| folder | tests | s |",
        "|---|---:|---:|",
        *(f"| `{key}` | {count[key]} | {seconds[key]:.2f} |" for key in order),
    ]


def only_section(title: str, run: Run, tests: list[str]) -> list[str]:
    total = sum(run.seconds[test] for test in tests)
    lines = [f"### {title}: {len(tests)} tests, {total:.2f} s", ""]
    return [*lines, *folders_table(run, tests)] if tests else lines[:1]


def report(old: Run, new: Run, labels: tuple[str, str], top: int) -> str:
    """The comparison of two runs, as markdown."""
    found = compare(old, new)
    pairs = found.matched.values()
    old_s = sum(old.seconds[o] for o, _ in pairs)
    new_s = sum(new.seconds[n] for _, n in pairs)
    grown = sorted(
        ((new.seconds[n] - old.seconds[o], o, n) for o, n in pairs),
        key=lambda row: (-row[0], name(row[2])),
    )
    grown = [row for row in grown if row[0] > 0][:top]
    unmatched_s = (
        sum(old.seconds[test] for test in found.unmatched_old),
        sum(new.seconds[test] for test in found.unmatched_new),
    )
    lines = [
        "## Test suite: old and new durations",
        "",
        *runs_table(labels, (old, new)),
        "",
        "### Matched by name (unique in each run)",
        "",
        "| tests | old s | new s | change |",
        "|---:|---:|---:|---:|",
        f"| {len(found.matched)} | {old_s:.2f} | {new_s:.2f} | {change(old_s, new_s)} |",
        "",
        *only_section("Only in the new run", new, found.only_new),
        "",
        *only_section("Only in the old run", old, found.only_old),
        "",
        "### Left unmatched (name in both runs, not unique in one): "
        f"old {len(found.unmatched_old)} tests, {unmatched_s[0]:.2f} s; "
        f"new {len(found.unmatched_new)} tests, {unmatched_s[1]:.2f} s",
        "",
        f"### The {len(grown)} matched tests that grew most",
        "",
        "| test (new) | old s | new s | change s |",
        "|---|---:|---:|---:|",
        *(
            f"| {cell(n)} | {old.seconds[o]:.2f} | {new.seconds[n]:.2f} | +{delta:.2f} |"
            for delta, o, n in grown
        ),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", nargs="?", type=Path, help="pytest --durations=0 output, old")
    parser.add_argument("new", nargs="?", type=Path, help="pytest --durations=0 output, new")
    parser.add_argument("--top", type=int, default=10, help="matched tests that grew most")
    parser.add_argument("--smoke", action="store_true", help="two small files of its own")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="amaris-suite-") as tmp:
        if args.smoke:
            args.old, args.new = Path(tmp) / "old.txt", Path(tmp) / "new.txt"
            args.old.write_text(SMOKE_OLD, encoding="utf-8")
            args.new.write_text(SMOKE_NEW, encoding="utf-8")
        elif args.old is None or args.new is None:
            parser.error("OLD and NEW are required (or --smoke)")
        old, new = (
            parse(path.read_text(encoding="utf-8", errors="replace"))
            for path in (args.old, args.new)
        )
        labels = (f"old ({cell(str(args.old))})", f"new ({cell(str(args.new))})")
    print(report(old, new, labels, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
