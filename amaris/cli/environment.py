"""The environment steps of the commands that run Prefect (``serve``, ``repair``).

Prefect reads its settings (``PREFECT_API_URL``, the auth string, ``PREFECT_HOME``) from
the environment once, at import. A command that runs Prefect names one of these steps
(:func:`amaris.cli.common.command`); :func:`amaris.cli.main.run` enters it in a process
that has not imported Prefect, and only then imports the command's handler, whose module
imports Prefect at its top. This module imports no Prefect.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from amaris.app.launch import launched
from amaris.app.prefect_server import read_auth_string, recorded_server
from amaris.cli.common import CommandError, config_path
from amaris.cli.config import load, server_url
from amaris.settings import Settings, secret_value


@contextmanager
def launched_service(args: argparse.Namespace) -> Iterator[None]:
    """``amaris serve``'s start (:func:`amaris.app.launch.launched`: signals, the Prefect
    server child and its environment, the repair worker); sets ``args.settings`` and
    ``args.launch`` for the handler, :func:`amaris.cli.serve.serve`."""
    settings = load(
        args,
        **{
            "server.host": args.host or None,
            "server.port": args.port or None,
            "prefect.port": args.prefect_port or None,
        },
    )
    path = config_path(args)
    if path is not None and path.is_file():
        # Step runs that Prefect's runner executes in processes of their own
        # (``pipeline.executor: deployment``) build their pipeline context from it.
        os.environ.setdefault("AMARIS_CONFIG", str(path.resolve()))
    with launched(settings) as launch:
        args.settings, args.launch = settings, launch
        yield


@contextmanager
def recorded_prefect(args: argparse.Namespace) -> Iterator[None]:
    """``amaris repair``'s environment: the Prefect server of a running ``amaris serve``,
    and the amaris server the repair flow targets.

    Raises:
        CommandError: no Prefect server runs for this data folder (code 1).
    """
    settings = load(args)
    if not use_recorded_prefect(settings):
        raise CommandError("no Prefect server for this data folder; is `amaris serve` running?", 1)
    # The operator's own run: the flow repairs the server this command names.
    os.environ["AMARIS_REPAIR_URL"] = server_url(settings, args.url)
    key = secret_value(settings.server.api_key)
    if key:
        os.environ.setdefault("AMARIS_API_KEY", key)
    yield


def prefect_home(settings: Settings) -> Path:
    """``PREFECT_HOME``, else the data folder's ``prefect`` folder."""
    return Path(os.environ.get("PREFECT_HOME") or Path(settings.memory.path).resolve() / "prefect")


def use_recorded_prefect(settings: Settings) -> bool:
    """Point this process at the Prefect server a running ``amaris serve`` started, with
    its auth string."""
    if os.environ.get("PREFECT_API_URL"):
        return True
    home = prefect_home(settings)
    recorded = recorded_server(home)
    if recorded is None:
        return False
    os.environ["PREFECT_HOME"] = str(home)
    os.environ["PREFECT_API_URL"] = recorded["api_url"]
    auth = read_auth_string(home)
    if auth is not None:
        os.environ["PREFECT_API_AUTH_STRING"] = auth
    return True
