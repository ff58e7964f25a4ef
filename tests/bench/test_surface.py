"""bench/evaluations/surface.py: what the comparison reports as lost and added, and a smoke
run that dumps this tree and finds nothing lost against itself."""

from __future__ import annotations

import re

import pytest

from bench.evaluations import surface as bench

OLD = {
    "operations": ["GET /healthz", "POST /score"],
    "keys": ["memory.path", "server.port"],
    "commands": {"amaris": ["--help"], "serve": ["--config", "--port"], "ui": []},
}


def test_the_comparison_names_what_the_new_tree_lost() -> None:
    new = {
        "operations": ["GET /healthz", "POST /score", "POST /complete"],
        "keys": ["memory.path"],
        "commands": {"amaris": ["--help"], "serve": ["--config"], "export": []},
    }
    assert bench.compare(OLD, new) == [
        "operations: 2 -> 3, removed 0 []",
        "  added 1: ['POST /complete']",
        "keys: 2 -> 1, removed 1 ['server.port']",
        "  added 0",
        "commands: 3 -> 3, removed ['ui'], added ['export']",
        "options of the old commands: 3, removed {'serve': ['--port']}",
    ]


@pytest.mark.slow  # the CLI's --help, command by command, in processes of its own
def test_the_smoke_run_finds_nothing_lost_against_itself(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench.main(["--smoke"])
    lines = capsys.readouterr().out.splitlines()
    counts = {}
    for line in lines:
        found = re.fullmatch(r"(operations|keys): (\d+) -> \2, removed 0 \[\]", line)
        if found:
            counts[found.group(1)] = int(found.group(2))
    assert set(counts) == {"operations", "keys"} and min(counts.values()) > 0
    commands = re.fullmatch(r"commands: (\d+) -> \1, removed \[\], added \[\]", lines[4])
    assert commands is not None and int(commands.group(1)) > 1  # subcommands walked too
    assert re.fullmatch(r"options of the old commands: \d+, removed none", lines[5])
