"""Lines per top-level part of the production code, before and after the layout in layers;
function-level imports; the import-rule report.

Issue 13 counted the production code at ``663507e``: 9,983 of 12,056 lines in ``amaris/``,
a flat bag of modules, and about 80 imports inside functions. This counts the same way in
two git trees (``--before``, ``--after``): ``wc -l`` of every ``.py`` file outside
``tests/``, ``bench/`` and ``examples/``, per top-level folder, and inside ``amaris/`` per
sub-package (its modules at the top together in one row). Function-level imports are
counted as ``tests/test_layers.py`` finds them (an ``import`` not at column 0, outside
``if TYPE_CHECKING:``), with how many of them that test's allow-list (with a reason each)
accepts in the ``--after`` tree.

The import-rule report is ``lint-imports`` (import-linter, the contracts of
``pyproject.toml``) and ``pytest tests/test_layers.py`` on the working tree.

Usage::

    .venv/bin/python bench/layout_lines.py [--before 663507e] [--after HEAD] [--write]

``--write`` replaces this benchmark's section of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from _common import ROOT, command_line, markers, write_doc

sys.path.insert(0, str(ROOT))
# The rule and its allow-list are the import-rule test's own: counted here as it checks them.
from tests.test_layers import (
    FUNCTION_LEVEL_IMPORTS_ALLOWED,
    function_level_imports,
)

PACKAGES = ("amaris", "api", "flows", "tasks", "deployments")
NOT_PRODUCTION = ("tests/", "bench/", "examples/")


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True
    ).stdout


def production_files(ref: str) -> dict[str, str]:
    """Path -> text of the ``.py`` files of ``ref`` outside tests, benchmarks, examples."""
    paths = [
        p
        for p in _git("ls-tree", "-r", "--name-only", ref).splitlines()
        if p.endswith(".py") and not p.startswith(NOT_PRODUCTION)
    ]
    return {p: _git("show", f"{ref}:{p}") for p in paths}


def part_of(path: str) -> str:
    """``amaris/<sub-package>/``, ``amaris/*.py`` or the top-level folder of ``path``."""
    parts = path.split("/")
    if parts[0] == "amaris":
        return f"amaris/{parts[1]}/" if len(parts) > 2 else "amaris/*.py"
    return f"{parts[0]}/" if len(parts) > 1 else path


def lines(text: str) -> int:
    """What ``wc -l`` counts: newlines."""
    return text.count("\n")


def tally(ref: str) -> tuple[str, Counter[str], Counter[str], int, int]:
    """(commit, lines per part, files per part, function-level imports, of them allowed)."""
    commit = _git("rev-parse", "--short", ref).strip()
    files = production_files(ref)
    per_part: Counter[str] = Counter()
    count: Counter[str] = Counter()
    hidden = allowed = 0
    allow = FUNCTION_LEVEL_IMPORTS_ALLOWED
    for path, text in files.items():
        per_part[part_of(path)] += lines(text)
        count[part_of(path)] += 1
        for _, name in function_level_imports(text):
            hidden += 1
            allowed += name in allow.get(path, set())
    return commit, per_part, count, hidden, allowed


def import_report() -> tuple[list[str], str]:
    """The contract lines of ``lint-imports``, and the summary of ``tests/test_layers.py``."""
    lint = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--config", "pyproject.toml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    keep = re.compile(r"^(Analyzed |.* (KEPT|BROKEN)\b|Contracts: )")
    contracts = [line for line in lint.stdout.splitlines() if keep.match(line)]
    contracts.append(f"(exit {lint.returncode})")
    test = subprocess.run(
        [
            sys.executable,
            *("-m", "pytest", "-n", "0", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"),
            "tests/test_layers.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    summary = [line for line in test.stdout.splitlines() if line.strip()][-1:]
    return contracts, f"{summary[0] if summary else '?'} (exit {test.returncode})"


def render(before: str, after: str) -> str:
    b_commit, b_lines, b_files, b_hidden, _ = tally(before)
    a_commit, a_lines, a_files, a_hidden, a_allowed = tally(after)
    tops = ("amaris", "api", "flows", "tasks", "deployments")

    def top(counter: Counter[str], name: str) -> int:
        return sum(n for part, n in counter.items() if part.split("/")[0] == name)

    def cell(counter: Counter[str], files: Counter[str], part: str) -> str:
        return f"{counter[part]:,} ({files[part]})" if part in counter else "-"

    start, end = markers("layout_lines")
    out = [
        start,
        "## Lines per top-level part, before and after the layout in layers (issue 13)",
        "",
        f"Command: `{command_line()}`. Production code: every `.py` file outside `tests/`, "
        "`bench/` and `examples/`, counted as `wc -l` does; before is "
        f"`{b_commit}` (where issue 13 counted 9,983 of 12,056 lines in `amaris/`), after "
        f"`{a_commit}`.",
        "",
        "| part | before | after |",
        "|---|---:|---:|",
    ]
    for name in tops:
        out.append(f"| `{name}/` | {top(b_lines, name):,} | {top(a_lines, name):,} |")
    out.append(f"| **total** | **{sum(b_lines.values()):,}** | **{sum(a_lines.values()):,}** |")
    out += [
        "",
        "Inside `amaris/`, lines (files) per sub-package; `amaris/*.py` is the modules at its top:",
        "",
        "| part | before | after |",
        "|---|---:|---:|",
    ]
    parts = sorted(
        {p for p in [*b_lines, *a_lines] if p.startswith("amaris/")},
        key=lambda p: (p != "amaris/*.py", p),
    )
    for part in parts:
        out.append(
            f"| `{part}` | {cell(b_lines, b_files, part)} | {cell(a_lines, a_files, part)} |"
        )
    contracts, layers_test = import_report()
    out += [
        "",
        f"Imports inside a function or class (`tests/test_layers.py`'s rule): {b_hidden} before, "
        f"{a_hidden} after, all {a_allowed} of them on that test's allow-list (each with its "
        "reason: [architecture.md](architecture.md#allowed-function-level-imports)).",
        "",
        "Import rules on the working tree: `lint-imports` (the contracts in `pyproject.toml`, "
        "`[tool.importlinter]`):",
        "",
        "```",
        *contracts,
        "```",
        "",
        "`pytest tests/test_layers.py` (the contracts, no function-level import off the "
        f"allow-list, every third-party import declared in `pyproject.toml`): {layers_test}.",
        end,
    ]
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default="663507e", help="git ref of the before tree")
    parser.add_argument("--after", default="HEAD", help="git ref of the after tree")
    parser.add_argument("--write", action="store_true", help="write docs/benchmarks.md")
    args = parser.parse_args()
    text = render(args.before, args.after)
    print(text)
    if args.write:
        start, end = markers("layout_lines")
        write_doc(ROOT / "docs" / "benchmarks.md", text, start, end)


if __name__ == "__main__":
    main()
