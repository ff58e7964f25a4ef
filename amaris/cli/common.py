"""What the command declarations share: the one ``--config`` option (and ``--url``,
``--json``), argument types, how a command names its handler, and the error a command
stops with.

This module and :mod:`amaris.cli.commands` are the light layer of the command line:
they import argparse and the standard library only, so ``amaris --help`` and a usage
error cost no service import. A command names its handler, and optionally an environment
step, as ``"module:function"`` (:func:`command`); :func:`amaris.cli.main.run` imports them
once the command is known.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

Command = Callable[[argparse.Namespace], int]
"""A handler: the parsed arguments in, the exit code out."""

Environment = Callable[[argparse.Namespace], AbstractContextManager[None]]
"""An environment step: what a command sets up before its handler's module is imported
(Prefect's environment: Prefect reads it once, at import), and tears down after the
handler; it may add what it prepared to the arguments (``args.settings``)."""

DEFAULT_CONFIG = Path("config.yaml")

CONFIG = argparse.ArgumentParser(add_help=False)
"""The ``--config`` option, the parent of every sub-command that reads the configuration."""
CONFIG.add_argument(
    "--config",
    type=Path,
    default=None,
    help="config file (default: ./config.yaml if present, else built-ins)",
)

STORE = argparse.ArgumentParser(add_help=False, parents=[CONFIG])
"""``--config`` and ``--url``: the options of every command that reads the store
(:mod:`amaris.cli.store`)."""
STORE.add_argument(
    "--url", default=None, help="server to ask when it holds the store (default: from server:)"
)
JSON = argparse.ArgumentParser(add_help=False)
"""``--json``."""
JSON.add_argument("--json", action="store_true", help="machine-readable output")


class SubParsers(Protocol):
    """The part of ``argparse``'s sub-parser action a group registers its commands with
    (``ArgumentParser.add_subparsers()``'s result, whose class argparse keeps private)."""

    def add_parser(
        self, name: str, *, help: str | None = ..., parents: Sequence[argparse.ArgumentParser] = ...
    ) -> argparse.ArgumentParser: ...


class CommandError(RuntimeError):
    """A command cannot answer; ``amaris`` prints the message and exits with ``code``."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def config_path(args: argparse.Namespace) -> Path | None:
    """The configuration file the command reads (``--config``, else ``./config.yaml``)."""
    path: Path | None = args.config
    if path is None and DEFAULT_CONFIG.is_file():
        path = DEFAULT_CONFIG
    return path


HIDDEN: set[str] = set()
"""Sub-commands left out of ``amaris --help`` (started by amaris itself)."""


def command(
    sub: SubParsers,
    name: str,
    handler: str,
    *,
    help: str | None,
    parents: Sequence[argparse.ArgumentParser] = (),
    environment: str | None = None,
) -> argparse.ArgumentParser:
    """Add the sub-command ``name``, with the options of ``parents`` (:data:`CONFIG` for a
    command that reads the configuration); without ``help``, it is :data:`HIDDEN`.

    ``handler`` names its :data:`Command` as ``"module:function"``; ``environment``, if
    given, names its :data:`Environment` step the same way, which runs before the
    handler's module is imported.
    """
    if help is None:
        # argparse lists a sub-command given help=SUPPRESS as "==SUPPRESS==": give none.
        HIDDEN.add(name)
        parser = sub.add_parser(name, parents=parents)
    else:
        parser = sub.add_parser(name, help=help, parents=parents)
    parser.set_defaults(handler=handler, environment=environment)
    return parser


def bounded(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argument type: an integer within ``[low, high]``."""

    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is below {low}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{value} is above {high}")
        return value

    return parse
