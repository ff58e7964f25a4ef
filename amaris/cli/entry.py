"""The ``amaris`` console script: the command line, or which extra to install for it.

The base install (``pip install amaris``) is the trainer side: :mod:`amaris.client` and
:mod:`amaris.integrations`, with httpx and pydantic only. The command declarations import
nothing more (:mod:`amaris.cli.main`), but every ``amaris`` command is the service's (or the
simulator's): in that install its handler cannot import, and this says so and names the
extra, instead of a traceback.
"""

from __future__ import annotations

import sys

from amaris.cli.main import main as run_command

OWN_PACKAGES = frozenset({"amaris", "api", "flows", "tasks", "deployments"})
"""Top-level packages of this distribution: a missing module among them is a bug."""

SIM_PACKAGES = frozenset({"matplotlib"})
"""Top-level modules the ``sim`` extra adds to the ``server`` extra."""

EXTRA_USES = {
    "server": "the reward service (amaris serve and the other commands)",
    "sim": "the simulator (amaris simulate, amaris replay)",
}


def missing_extra(error: ModuleNotFoundError) -> str | None:
    """The extra that provides the module ``error`` did not find; ``None`` for one of
    amaris's own modules."""
    top = (error.name or "").partition(".")[0]
    if not top or top in OWN_PACKAGES:
        return None
    return "sim" if top in SIM_PACKAGES else "server"


def main(argv: list[str] | None = None) -> int:
    """Run the command; if a module of an extra that is not installed is missing, name the
    extra (exit code 1)."""
    try:
        return run_command(argv)
    except ModuleNotFoundError as error:
        extra = missing_extra(error)
        if extra is None:
            raise
        print(
            f"amaris: this command needs the '{extra}' extra, which is not installed "
            f"(no module named {error.name!r}). The base install is the trainer side "
            f"(amaris.client, amaris.integrations); for {EXTRA_USES[extra]}: "
            f"pip install 'amaris[{extra}]'",
            file=sys.stderr,
        )
        return 1
