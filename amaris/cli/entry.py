"""The ``amaris`` console script: the command line, or which extra to install for it.

The base install (``pip install amaris``) is the trainer side: :mod:`amaris.client` and
:mod:`amaris.integrations`, with httpx and pydantic only. The command declarations import
nothing more (:mod:`amaris.cli.main`), but every ``amaris`` command is the service's (or the
simulator's): in that install its handler cannot import, and this says so and names the
extra, instead of a traceback.
"""

from __future__ import annotations

import sys
from importlib.util import find_spec
from pathlib import Path

from amaris.cli.main import main as run_command

ROOT_PACKAGES = ("api", "flows", "tasks", "deployments")
"""amaris's packages beside ``amaris`` (the repository's root folders of those names)."""

OWN_PACKAGES = frozenset({"amaris", *ROOT_PACKAGES})
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


def shadowed_packages() -> list[str]:
    """amaris's root packages that a folder or module of the same name, found first on the
    import path (a project's ``tasks/`` in the working directory), would replace: each as
    ``name (path)``."""
    home = Path(__file__).resolve().parents[2]
    shadowed = []
    for name in ROOT_PACKAGES:
        spec = find_spec(name)
        origin = spec.origin if spec is not None else None
        if origin is None or Path(origin).resolve() != home / name / "__init__.py":
            shadowed.append(f"{name} ({origin or 'not found'})")
    return shadowed


def main(argv: list[str] | None = None) -> int:
    """Run the command; if a module of an extra that is not installed is missing, name the
    extra (exit code 1). If another package hides one of amaris's, say which (exit code 1)."""
    shadowed = shadowed_packages()
    if shadowed:
        print(
            f"amaris: other packages hide amaris's own: {', '.join(shadowed)}. "
            "Run amaris from another folder, or take that folder off PYTHONPATH.",
            file=sys.stderr,
        )
        return 1
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
