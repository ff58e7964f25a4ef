"""``amaris repair`` and ``repair-worker``: the scheduled repair's flow run once, or its
deployment served (this module imports Prefect: ``repair`` runs in the environment
:func:`amaris.cli.environment.recorded_prefect` set, ``repair-worker`` in the process
``amaris serve`` spawns with it set)."""

from __future__ import annotations

import argparse
import asyncio
import json

from deployments.repair import serve_repair
from flows.repair import repair_steps


def repair(args: argparse.Namespace) -> int:
    """Re-run the failed steps once, on the Prefect server of a running ``amaris serve``."""
    outcome = asyncio.run(repair_steps())
    print(json.dumps({str(k): v for k, v in outcome.items()}) if outcome else "no failed steps")
    return 0 if all(v not in ("failed", "pending") for v in outcome.values()) else 1


def repair_worker(args: argparse.Namespace) -> int:
    """Serve the scheduled repair (in the process ``amaris serve`` spawns, with Prefect's
    environment set)."""
    serve_repair(args.interval)
    return 0
