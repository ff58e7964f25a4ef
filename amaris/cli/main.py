"""The ``amaris`` command.

Two layers. The command declarations (:mod:`amaris.cli.commands`, one module per command
group) import argparse only, so ``amaris --help`` and a usage error cost no service
import. Each command names its handler, and optionally an environment step, as
``"module:function"``; :func:`run` imports the one command's step, enters it, and only then
imports and calls its handler. That order is what Prefect needs: it reads its settings
from the environment once, at import, so ``serve`` and ``repair`` set them in their step
(:mod:`amaris.cli.environment`) and their handlers import Prefect at the top of their
modules. This is the one place the command line imports a module by name
(tests/layout/test_layers.py); every other import is at a module's top.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from contextlib import ExitStack
from typing import cast

from amaris.cli.commands import (
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
from amaris.cli.common import HIDDEN, Command, CommandError, Environment, SubParsers

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

EXIT_CODES: dict[str, int] = {
    # The Prefect server child did not start or died.
    "amaris.app.prefect_server.PrefectServerError": 1,
    # The configuration or the data folder is wrong.
    "amaris.settings.loader.ConfigError": 2,
    "amaris.agents.prompts.PromptError": 2,
    "amaris.memory.qdrant.StoreLockedError": 2,
    "amaris.rubric.store.RubricStoreError": 2,
    "amaris.memory.store.MemoryStoreError": 2,
    "amaris.memory.embedder.EmbedderConfigError": 2,
    "amaris.memory.qdrant.CollectionMismatchError": 2,
    "amaris.private.UnsafeFolderError": 2,
}
"""The exit code of a command stopped by one of these errors (``module.Class``; a subclass
too), its message printed. Named, not imported: the modules defining them are imported by
the commands that raise them (tests/app/test_cli_layout.py checks every name)."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every sub-command."""
    parser = argparse.ArgumentParser(prog="amaris", description="The ``amaris`` command.")
    sub = parser.add_subparsers(dest="command", required=True)
    for register in COMMAND_GROUPS:
        register(sub)
    sub.metavar = "{" + ",".join(name for name in sub.choices if name not in HIDDEN) + "}"
    return parser


def resolve(name: str) -> object:
    """The object ``"module:attribute"`` names, its module imported."""
    module, _, attribute = name.partition(":")
    found: object = getattr(importlib.import_module(module), attribute)
    return found


def run(args: argparse.Namespace) -> int:
    """Carry out the parsed command: its environment step entered (if it names one), then
    its handler imported and called; the step is left after the handler."""
    with ExitStack() as stack:
        if args.environment is not None:
            environment = cast(Environment, resolve(args.environment))
            stack.enter_context(environment(args))
        handler = cast(Command, resolve(args.handler))
        return handler(args)


def exit_code(error: Exception) -> int | None:
    """The exit code of a command stopped by ``error``; None if it is a bug."""
    if isinstance(error, CommandError):
        return error.code
    for kind in type(error).__mro__:
        code = EXIT_CODES.get(f"{kind.__module__}.{kind.__qualname__}")
        if code is not None:
            return code
    return None


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except Exception as error:
        code = exit_code(error)
        if code is None:
            raise
        print(f"amaris: {error}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
