"""The command line as a reader finds it: one module per command group that registers its
commands, one ``--config`` option shared by every command that reads the configuration,
and small modules (issue 24). The commands themselves are the contract: none added,
none lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from amaris.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "amaris" / "cli"

COMMANDS: dict[str, tuple[str, list[str]]] = {
    "serve": ("service", []),
    "check-judge": ("service", []),
    "repair": ("service", []),
    "repair-worker": ("service", ["--interval", "60"]),
    "ui": ("service", []),
    "rubrics show": ("rubrics", []),
    "rubrics init": ("rubrics", []),
    "rubrics history": ("rubrics", []),
    "rubrics diff": ("rubrics", ["1", "2"]),
    "memory inspect": ("memory", []),
    "memory search": ("memory", ["some text"]),
    "simulate": ("simulate", []),
    "replay": ("replay", []),
    "export": ("export", []),
    "bootstrap": ("bootstrap", ["--data", "ranked.json"]),
    "manifest": ("manifest", []),
    "offline-llm": ("offline_llm", []),
    "audit ack": ("audit", []),
    "audit status": ("audit", []),
}
"""Every command: the module of its group, and the arguments it requires."""
NO_CONFIGURATION = {"offline-llm", "repair-worker"}
"""The commands that read no configuration (so take no ``--config``)."""


def test_the_commands_are_those_of_before() -> None:
    usage = build_parser().format_usage()
    listed = usage[usage.index("{") + 1 : usage.index("}")].split(",")
    assert listed == list(dict.fromkeys(name.split()[0] for name in COMMANDS))


@pytest.mark.parametrize("name", COMMANDS)
def test_each_command_is_run_by_its_group_module(name: str) -> None:
    module, required = COMMANDS[name]
    args = build_parser().parse_args([*name.split(), *required])
    # each group module registers its commands and runs them; main only dispatches
    assert args.run.__module__ == f"amaris.cli.{module}"


@pytest.mark.parametrize("name", COMMANDS)
def test_config_is_one_option_of_every_command_that_reads_it(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # the help on one line per option
    _, required = COMMANDS[name]
    argv = [*name.split(), *required, "--config", "my.yaml"]
    if name in NO_CONFIGURATION:
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv)
        assert "unrecognized arguments: --config my.yaml" in capsys.readouterr().err
        return
    assert build_parser().parse_args(argv).config == Path("my.yaml")
    with pytest.raises(SystemExit):
        build_parser().parse_args([*name.split(), "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--config CONFIG config file (default: ./config.yaml if present, else built-ins)" in (
        shown
    )


def test_config_is_declared_once() -> None:
    declared = [
        path.name
        for path in sorted(CLI.glob("*.py"))
        for _ in range(path.read_text(encoding="utf-8").count('"--config"'))
    ]
    assert declared == ["common.py"]


def test_settings_and_cli_modules_are_small() -> None:
    paths = [*ROOT.glob("amaris/settings*.py"), *ROOT.glob("amaris/settings/*.py")]
    paths += CLI.glob("*.py")
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in paths}
    assert {path: n for path, n in sizes.items() if n > 450} == {}
