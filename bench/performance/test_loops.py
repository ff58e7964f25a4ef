"""Wall time of the quick test loop (``pytest -m "not slow"``) and of the whole suite.

Runs ``python -m pytest`` twice from the repository root with the suite's own options
(``pyproject.toml``: ``-n 2 --dist loadfile --no-loadscope-reorder``, files in
``tests/conftest.py``'s order): once with ``-m "not slow"``, once with
everything (as ``.ci/run`` does), and writes the section ``test_loops`` of
``docs/benchmarks.md``: wall time, the pytest summary line, machine and load, and the time
the real-model tier (``tests/llm/test_real_model.py``, marker ``real_model``) took inside the
run: its tests' summed durations from pytest's JUnit report, setup included (with
``--dist loadfile`` the file runs on one worker while the other runs the rest).

    .venv/bin/python -m bench.performance.test_loops [--only quick|full] [--out FILE] [--smoke]

``--smoke``: each loop over :data:`SMOKE_TESTS` alone, in one process without the
conftest; its section is printed, or written to an ``--out`` other than the page.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from bench._common import doc_section, loadavg, markers, report_path, write_doc

ROOT = Path(__file__).resolve().parents[2]
RUNS = {"quick": ["-m", "not slow"], "full": []}
TIER_CLASSES = "tests.llm.test_real_model"
"""JUnit class names of the real-model tier's tests."""
SMOKE_TESTS = "tests/rubric/test_aggregate.py"
SMOKE_ARGS = ["-o", "addopts=", "-p", "no:xdist", "--noconftest", SMOKE_TESTS]


def tier_seconds(report: Path) -> tuple[int, float]:
    """Tests of the real-model tier in the JUnit ``report`` and their summed time."""
    if not report.is_file():
        return 0, 0.0
    cases = [
        case
        for case in ET.parse(report).getroot().iter("testcase")
        if case.get("classname", "").startswith(TIER_CLASSES)
    ]
    return len(cases), sum(float(case.get("time", 0.0)) for case in cases)


def run(
    extra: list[str], durations: int, keep: Path | None = None
) -> tuple[float, str, int, tuple[int, float]]:
    """Wall seconds, pytest's last summary line, its exit status and the real-model tier's
    (tests, seconds) (prints the ``durations`` slowest tests)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="amaris-loops-") as tmp:
        report = Path(tmp) / "junit.xml"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                f"--junitxml={report}",
                *([f"--durations={durations}"] if durations else []),
                *extra,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        elapsed = time.monotonic() - started
        tier = tier_seconds(report)
        if keep is not None and report.is_file():
            shutil.copyfile(report, keep)
    if durations:
        slowest = done.stdout.split("slowest", 1)
        print("slowest" + slowest[1].split("\n\n", 1)[0] if len(slowest) > 1 else "", flush=True)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return elapsed, (lines[-1] if lines else done.stderr[-300:]), done.returncode, tier


def earlier_rows(doc: Path, start: str, end: str) -> dict[str, str]:
    """The rows of this benchmark's section already in ``doc``, by run."""
    text = doc.read_text(encoding="utf-8") if doc.is_file() else ""
    section = text.split(start, 1)[1].split(end, 1)[0] if start in text else ""
    return {
        line.split("|")[1].strip(): line
        for line in section.splitlines()
        if line.startswith("| `pytest")
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(RUNS), help="run one loop only")
    parser.add_argument("--durations", type=int, default=0, help="print the N slowest tests")
    parser.add_argument(
        "--junit", type=Path, help="keep the JUnit report of the (last) run here (per-file times)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="markdown file to update (default docs/benchmarks.md; with --smoke, none)",
    )
    parser.add_argument("--smoke", action="store_true", help=f"each loop over {SMOKE_TESTS}")
    args = parser.parse_args(argv)
    doc = report_path(args.out, args.smoke)
    start, end = markers("test_loops")
    rows = earlier_rows(doc, start, end) if doc is not None else {}
    for name, extra in RUNS.items():
        if args.only and name != args.only:
            continue
        before = loadavg()
        tests = [*extra, *SMOKE_ARGS] if args.smoke else extra
        elapsed, summary, code, (tier_tests, tier_s) = run(tests, args.durations, args.junit)
        after = loadavg(all_three=True)
        shown = "`" + " ".join(["pytest", *(f'"{a}"' if " " in a else a for a in extra)]) + "`"
        tier = f"{tier_tests} tests, {tier_s:.0f} s" if tier_tests else "not run"
        rows[shown] = (
            f"| {shown} | {elapsed:.0f} s | {summary} (exit {code}) | {tier} "
            f"| {before} -> {after} |"
        )
        print(rows[shown], flush=True)
    table = [
        "| run | wall time | pytest summary | real-model tier inside it "
        "| load average before -> after (1/5/15 min) |",
        "|---|---:|---|---|---|",
        *rows.values(),
    ]
    text = doc_section(
        "test_loops",
        'Test loops: quick (`-m "not slow"`) and full',
        "Wall time of the quick loop and of the whole suite, each with the suite's own "
        "`-n 2 --dist loadfile --no-loadscope-reorder`, and the real-model tier's summed test "
        "time inside the full run.",
        "\n".join(table),
        script=__file__,
        load=loadavg(all_three=True),
    )
    if doc is None:
        print(text)
    else:
        write_doc(doc, text, start, end)


if __name__ == "__main__":
    main()
