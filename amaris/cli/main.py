"""The ``amaris`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from amaris.agents.prompts import PromptError
from amaris.app.prefect_server import PrefectServerError
from amaris.cli import (
    audit,
    bootstrap,
    export,
    manifest,
    memory,
    offline_llm,
    replay,
    rubrics,
    service,
    simulate,
)
from amaris.cli.common import Command, CommandError, SubParsers
from amaris.memory.embedder import EmbedderConfigError
from amaris.memory.qdrant import CollectionMismatchError, StoreLockedError
from amaris.memory.store import MemoryStoreError
from amaris.private import UnsafeFolderError
from amaris.rubric.store import RubricStoreError
from amaris.settings import ConfigError

COMMAND_GROUPS: tuple[Callable[[SubParsers], None], ...] = (
    service.register,
    rubrics.register,
    memory.register,
    simulate.register,
    replay.register,
    export.register,
    bootstrap.register,
    manifest.register,
    offline_llm.register,
    audit.register,
)
"""Each command group adds its sub-commands, in the order ``amaris --help`` lists them."""

USAGE_ERRORS = (
    ConfigError,
    PromptError,
    StoreLockedError,
    RubricStoreError,
    MemoryStoreError,
    EmbedderConfigError,
    CollectionMismatchError,
    UnsafeFolderError,
)
"""What a command stops with when the configuration or the data folder is wrong (exit 2)."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every sub-command."""
    parser = argparse.ArgumentParser(prog="amaris", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for register in COMMAND_GROUPS:
        register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    args = build_parser().parse_args(argv)
    run: Command = args.run
    try:
        return run(args)
    except CommandError as exc:
        print(f"amaris: {exc}", file=sys.stderr)
        return exc.code
    except PrefectServerError as exc:
        print(f"amaris: {exc}", file=sys.stderr)
        return 1
    except USAGE_ERRORS as exc:
        print(f"amaris: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
