"""The command line as a reader finds it: one module per command group that declares its
commands and names their handlers, one ``--config`` option shared by every command that
reads the configuration, and small modules. The declarations are light: ``amaris
--help`` imports no service stack. The commands themselves are the contract: none added,
none lost."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from amaris.cli import main as cli
from amaris.cli.commands import memory as memory_commands
from amaris.cli.main import build_parser, resolve
from amaris.memory import inspection, models

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "amaris" / "cli"

COMMANDS: dict[str, tuple[str, str, list[str]]] = {
    "serve": ("service", "serve", []),
    "check-judge": ("service", "service", []),
    "repair": ("service", "repair", []),
    "repair-worker": ("service", "repair", ["--interval", "60"]),
    "ui": ("service", "service", []),
    "rubrics show": ("rubrics", "rubrics", []),
    "rubrics init": ("rubrics", "rubrics", []),
    "rubrics history": ("rubrics", "rubrics", []),
    "rubrics diff": ("rubrics", "rubrics", ["1", "2"]),
    "memory inspect": ("memory", "memory", []),
    "memory search": ("memory", "memory", ["some text"]),
    "simulate": ("simulate", "simulate", []),
    "replay": ("replay", "replay", []),
    "export": ("export", "export", []),
    "bootstrap": ("bootstrap", "bootstrap", ["--data", "ranked.json"]),
    "manifest": ("manifest", "manifest", []),
    "offline-llm": ("offline_llm", "offline_llm", []),
    "audit ack": ("audit", "audit", []),
    "audit status": ("audit", "audit", []),
}
"""Every command: the module of its group's declarations (in amaris.cli.commands), the
module of its handler (in amaris.cli), and the arguments it requires."""
PREFECT_COMMANDS = {"serve": "launched_service", "repair": "recorded_prefect"}
"""The commands that run Prefect in this process, and their environment step."""
SERVICE_STACK = {
    "prefect",
    "fastapi",
    "starlette",
    "uvicorn",
    "torch",
    "qdrant_client",
    "sentence_transformers",
    "openai",
    "sqlalchemy",
    "yaml",
    "matplotlib",
}
NO_CONFIGURATION = {"offline-llm", "repair-worker"}
"""The commands that read no configuration (so take no ``--config``)."""


def test_the_parser_lists_every_declared_command() -> None:
    parser = build_parser()
    usage = parser.format_usage()
    listed = usage[usage.index("{") + 1 : usage.index("}")].split(",")
    declared = list(dict.fromkeys(name.split()[0] for name in COMMANDS))
    # repair-worker is amaris's own: it runs, unlisted
    assert listed == [name for name in declared if name != "repair-worker"]
    assert parser.parse_args(["repair-worker", "--interval", "5"]).interval == 5


def test_the_help_lists_only_the_commands_a_user_runs() -> None:
    text = build_parser().format_help()
    assert "==SUPPRESS==" not in text and "repair-worker" not in text
    assert "serve" in text and "run the reward service" in text


@pytest.mark.parametrize("name", COMMANDS)
def test_each_command_is_declared_by_its_group_and_names_its_handler(name: str) -> None:
    group, module, required = COMMANDS[name]
    args = build_parser().parse_args([*name.split(), *required])
    # the group module declares the command: its register() alone adds it ...
    alone = argparse.ArgumentParser(prog="amaris")
    importlib.import_module(f"amaris.cli.commands.{group}").register(alone.add_subparsers())
    declared = vars(alone.parse_args([*name.split(), *required]))
    assert declared == {key: value for key, value in vars(args).items() if key != "command"}
    # ... and names its handler in amaris.cli; main only dispatches
    assert args.handler.partition(":")[0] == f"amaris.cli.{module}"
    handler = resolve(args.handler)
    assert callable(handler) and getattr(handler, "__module__", None) == f"amaris.cli.{module}"
    step = PREFECT_COMMANDS.get(name)
    assert args.environment == (step and f"amaris.cli.environment:{step}")
    if step is not None:
        assert callable(resolve(args.environment))


@pytest.mark.parametrize("name", COMMANDS)
def test_config_is_one_option_of_every_command_that_reads_it(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # the help on one line per option
    _, _, required = COMMANDS[name]
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


def _loaded_after(code: str, cwd: Path | None = None) -> set[str]:
    """The top-level modules a fresh interpreter loads running ``code`` (which may add
    module names to ``seen``, a list)."""
    probe = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        "seen = []\n"
        f"{code}\n"
        "print(json.dumps(sorted({m.partition('.')[0] for m in set(sys.modules) - before}"
        " | set(seen))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=cwd,
    )
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return set(loaded)


def test_help_and_usage_errors_load_no_service_stack() -> None:
    # The declarations import argparse only: `amaris --help`, a command's help and a usage
    # error print without importing Prefect, Qdrant, openai... (seconds of start-up each).
    code = (
        "from amaris.cli.entry import main\n"
        "for argv in (['--help'], ['rubrics', 'diff', '--help'], ['memory', 'search']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
    )
    loaded = _loaded_after(code)
    assert "amaris" in loaded and "argparse" in loaded
    assert loaded & SERVICE_STACK == set()


def test_a_handler_is_imported_when_its_command_runs_after_its_environment_step(
    tmp_path: Path,
) -> None:
    # YAML is a superset of JSON.
    (tmp_path / "config.yaml").write_text(json.dumps({"memory": {"path": str(tmp_path)}}))
    code = (
        "import os\n"
        "from amaris.cli.main import main\n"
        # no Prefect server recorded: repair's environment step stops it, before its
        # handler (which imports Prefect) is imported
        "assert main(['repair']) == 1\n"
        "assert 'amaris.cli.repair' not in sys.modules\n"
        "seen.append('repair-ok')\n"
        "os.environ['PREFECT_API_URL'] = 'http://127.0.0.1:1/api'\n"
        "assert main(['ui']) == 0\n"
        "assert 'amaris.cli.service' in sys.modules\n"
        "seen.append('ui-ok')\n"
    )
    loaded = _loaded_after(code, tmp_path)
    assert {"repair-ok", "ui-ok", "yaml", "openai"} <= loaded
    assert "prefect" not in loaded


def test_the_declared_memory_bounds_are_those_of_the_api() -> None:
    assert memory_commands.MAX_RECENT == inspection.MAX_RECENT
    assert memory_commands.MAX_SEARCH_LIMIT == inspection.MAX_SEARCH_LIMIT
    assert list(memory_commands.DOC_TYPES) == sorted(models.DOC_TYPES)


@pytest.mark.parametrize("name", cli.EXIT_CODES)
def test_each_error_with_an_exit_code_is_an_exception_class(name: str) -> None:
    module, _, qualname = name.rpartition(".")
    kind = resolve(f"{module}:{qualname}")
    assert isinstance(kind, type) and issubclass(kind, Exception)
    assert f"{kind.__module__}.{kind.__qualname__}" == name
    error = kind.__new__(kind)
    assert cli.exit_code(error) == cli.EXIT_CODES[name]
    # a subclass too
    sub = type("Sub", (kind,), {})
    assert cli.exit_code(sub.__new__(sub)) == cli.EXIT_CODES[name]
    assert cli.exit_code(RuntimeError("a bug")) is None
