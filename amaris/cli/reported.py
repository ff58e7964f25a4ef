"""The simulator commands' failures as one :class:`CommandError` (``amaris simulate``,
``replay``, ``export``). Apart from :mod:`amaris.cli.simulate` so ``export`` (the ``server``
extra) does not import the report and its plots (the ``sim`` extra)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from amaris.cli.common import CommandError
from amaris.client import AmarisError
from amaris.sim.driver import DriverError
from amaris.sim.server import ServerError


@contextmanager
def reported(name: str) -> Iterator[None]:
    """A simulator command's failures (server, driver, I/O) as a :class:`CommandError`
    naming the command."""
    try:
        yield
    except (AmarisError, DriverError, ServerError, TimeoutError, OSError) as exc:
        raise CommandError(f"{name}: {exc}", 1) from exc
