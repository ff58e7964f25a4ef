"""``amaris check-judge`` and ``ui``: the judge's endpoints probed, the Prefect UI's
address (``serve`` and ``repair``, which run Prefect: :mod:`amaris.cli.serve`,
:mod:`amaris.cli.repair`)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from amaris.app.check_judge import check_judges, render
from amaris.app.prefect_server import AUTH_FILE, recorded_server
from amaris.cli.config import load
from amaris.cli.environment import prefect_home
from amaris.redact import redact_url


def check_judge(args: argparse.Namespace) -> int:
    """Probe every agent's endpoint; 1 if any check failed."""
    rows = asyncio.run(check_judges(load(args)))
    print(render(rows))
    return 1 if any(row.failures for row in rows) else 0


def ui(args: argparse.Namespace) -> int:
    """Print the Prefect UI address of the running service (1 if none runs)."""
    settings = load(args)
    api_url = os.environ.get("PREFECT_API_URL")
    home = prefect_home(settings)
    recorded = recorded_server(home)
    if api_url:
        print(redact_url(api_url.removesuffix("/").removesuffix("/api")))
    elif recorded is not None:
        print(recorded["url"])
        auth = home / AUTH_FILE
        print(
            f"log in with the auth string in {auth} (`cat {auth}`; paste the whole line "
            "into the UI's password field)",
            file=sys.stderr,
        )
    else:
        print(
            "no Prefect server is running for this data folder; start `amaris serve`",
            file=sys.stderr,
        )
        return 1
    return 0
