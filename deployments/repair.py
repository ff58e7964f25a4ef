"""The scheduled repair: a Prefect deployment of ``amaris-repair`` on an interval.

``amaris serve`` runs :func:`serve_repair` in a child process when a real Prefect
server is available (only a server schedules deployments); its runs execute in
subprocesses and reach the amaris API over HTTP, at the address and with the key
``amaris serve`` put in that child's environment (``AMARIS_REPAIR_URL``,
``AMARIS_API_KEY``): the deployment has no parameter that names a server.
"""

from __future__ import annotations

from datetime import timedelta

from prefect import serve
from prefect.deployments.runner import RunnerDeployment

from flows.repair import repair_steps

DEPLOYMENT_NAME = "scheduled-repair"


def repair_deployment(interval_seconds: int) -> RunnerDeployment:
    """The deployment: ``amaris-repair/scheduled-repair`` every ``interval_seconds``."""
    deployment = repair_steps.to_deployment(
        name=DEPLOYMENT_NAME,
        interval=timedelta(seconds=interval_seconds),
        description="Re-runs amaris steps whose pipeline failed, reusing finished work.",
        tags=["amaris"],
    )
    assert isinstance(deployment, RunnerDeployment)  # sync call: not a coroutine
    return deployment


def serve_repair(interval_seconds: int) -> None:
    """Register the deployment and execute its scheduled runs (blocks)."""
    serve(repair_deployment(interval_seconds), print_starting_message=False)
