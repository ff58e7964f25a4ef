"""The step deployment: ``amaris-step/steps``, one run per attempt of a training step.

With ``pipeline.executor: deployment`` (several replicas of one shared store), replicas do
not run step flows themselves: they submit runs of this deployment with
:func:`submit_step`, and Prefect's own machinery executes them:

- no ``pipeline.work_pool``: every replica serves the deployment with a Prefect
  :class:`~prefect.runner.Runner` (:func:`add_steps`, as ``flow.serve()`` does). The
  runners poll the Prefect server and claim each scheduled run once; the claiming runner
  executes it in a process of its own.
- ``pipeline.work_pool: <pool>``: the deployment goes to that work pool
  (:func:`register_steps`) and the pool's workers execute the runs.

Either way a run executes in a fresh process, which builds its pipeline context (store,
judge, embedder) from the configuration ``AMARIS_CONFIG`` names: the store must be one
every process reaches (``memory.qdrant_url``).
"""

from __future__ import annotations

from uuid import UUID

from prefect.client.schemas.objects import FlowRun
from prefect.deployments import arun_deployment
from prefect.runner import Runner

from flows.step_pipeline import step_pipeline

DEPLOYMENT_NAME = "steps"
DEPLOYMENT = f"{step_pipeline.name}/{DEPLOYMENT_NAME}"
"""``amaris-step/steps``: the name :func:`submit_step` creates runs of."""
DESCRIPTION = "One run per attempt of a training step; executed by Prefect runners or workers."


async def register_steps(work_pool: str) -> UUID:
    """Register (idempotently) the deployment on ``work_pool``: its workers run the steps."""
    deployment = await step_pipeline.ato_deployment(
        name=DEPLOYMENT_NAME, tags=["amaris"], description=DESCRIPTION
    )
    return await deployment.aapply(work_pool_name=work_pool)


async def add_steps(runner: Runner) -> UUID:
    """Register the deployment with ``runner`` (served from ``runner.start()``, as
    ``flow.serve()`` does): Prefect's runner polls for the deployment's scheduled runs,
    claims each once across every runner of the server, and executes it in a subprocess."""
    return await runner.aadd_flow(
        step_pipeline, name=DEPLOYMENT_NAME, tags=["amaris"], description=DESCRIPTION
    )


async def submit_step(step: int, attempt: int) -> FlowRun:
    """Create the run of ``step``'s ``attempt``, named ``step-<N>``, and return it at once.

    The idempotency key ``step-<N>-<attempt>`` makes this safe to call from every replica
    that sees the step complete: Prefect holds one run per attempt and returns that run to
    every caller.
    """
    return await arun_deployment(
        DEPLOYMENT,
        parameters={"step": step},
        flow_run_name=f"step-{step}",
        idempotency_key=f"step-{step}-{attempt}",
        tags=["amaris"],
        timeout=0,
        as_subflow=False,
    )
