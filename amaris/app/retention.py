"""Retention of Prefect's store: old steps' history leaves Prefect's database, and their
task results leave its result folder.

Every ``prefect.retention_interval_seconds``, on the pipeline's loop, through Prefect's
client (``read_flow_runs``, ``read_task_runs``, and its REST API's bulk deletion of flow
runs, :data:`BULK_DELETE`):

- a run of ``amaris-step`` goes when the step registry shows its step done and the step is
  older than the newest ``prefect.keep_steps`` steps, or the run ended more than
  ``prefect.retention_hours`` ago. A step open, running or failed (awaiting repair) keeps
  every run, and a run not finished is never deleted.
- a finished run of ``amaris-repair`` goes past the newest ``keep_steps`` of them, or
  ``retention_hours`` after it ended.
- a result file of the LLM tasks (their cache, named ``<agent>-<sha256>``) goes when it
  was last written before the oldest run still kept of a done step, or of a step not
  finished; the results a failed step's runs wrote or reused stay for its repair.

Every pass also ends the runs Prefect never saw end: a run still pending or running once
the step registry shows its step done or failed (for :data:`LEFT_RUNNING_S`) gets that
final state, forced (its server refused the engine's own write: a full disk).

With a run, Prefect's server deletes its task runs and their states, then its logs; its
database vacuum deletes the artifacts of deleted runs, and events past its events
retention, as :func:`amaris.app.prefect_env.retention_env` sets it for the server
``amaris serve`` starts (one artifact deletion per request would cost six writes a step).
The runs deleted are those of the Prefect API amaris uses: a Prefect server that several
amaris stores share needs retention off (``keep_steps`` and ``retention_hours`` null) in
all but one.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast
from uuid import UUID

from prefect.client.orchestration import PrefectClient, get_client
from prefect.client.orchestration.routes import ServerRoutes
from prefect.client.schemas.filters import (
    FlowFilter,
    FlowFilterName,
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import TERMINAL_STATES, FlowRun, State, StateType
from prefect.client.schemas.sorting import FlowRunSort
from prefect.settings import get_current_settings
from prefect.states import Completed, Failed, to_state_create

from amaris.memory.rollout_log import StepRegistry
from amaris.settings import AGENTS, AUDITOR
from amaris.settings.sections import PrefectSettings
from flows.repair import repair_steps
from flows.step_pipeline import step_pipeline

log = logging.getLogger("amaris.prefect")

STEP_FLOW = step_pipeline.name
REPAIR_FLOW = repair_steps.name
PAGE = 200
"""Runs, task runs or artifacts per read: the Prefect API's default page limit."""
BATCH = 50
"""Flow run ids per filter, and per bulk deletion (the most Prefect's API takes)."""
BULK_DELETE = cast(ServerRoutes, "/flow_runs/bulk_delete")
"""Prefect's REST route deleting up to ``BATCH`` flow runs at once (its client has no method
for it: it deletes one run a request, a write each, which lags behind a busy server)."""
RESULT_PREFIXES = frozenset((*AGENTS, AUDITOR))
_HEX = frozenset("0123456789abcdef")
LEFT_RUNNING_S = 60.0
"""How long a run may stay unfinished after its last state change, its step's outcome
recorded, before it is ended: the engine's own final state may still be on its way."""


@dataclass(frozen=True)
class Plan:
    """What one pass removes, from the runs and the step registry as they were read."""

    remove: list[FlowRun] = field(default_factory=list)
    """Finished runs past the retention, of done steps or of the repair."""
    spare: list[FlowRun] = field(default_factory=list)
    """Finished runs kept for a step not done (failed, running, open): their results stay."""
    cutoff: datetime | None = None
    """Result files last written before it go (None: none go)."""


@dataclass(frozen=True)
class Pruned:
    """What one pass removed."""

    runs: int = 0
    files: int = 0
    file_bytes: int = 0
    ended: int = 0
    """Runs left unfinished that were given their step's final state."""


def is_result_file(name: str) -> bool:
    """Whether ``name`` is an LLM task's result file (its cache key, ``<agent>-<sha256>``):
    the only files amaris removes."""
    agent, dash, digest = name.rpartition("-")
    return bool(dash) and agent in RESULT_PREFIXES and len(digest) == 64 and set(digest) <= _HEX


def step_of(run: FlowRun) -> int | None:
    """The step a run of ``amaris-step`` ran: its ``step`` parameter, else its name."""
    step = run.parameters.get("step")
    if isinstance(step, int) and not isinstance(step, bool):
        return step
    number = (run.name or "").removeprefix("step-")
    if number != run.name and number.isascii() and number.isdigit() and len(number) <= 18:
        return int(number)
    return None


def plan(
    step_runs: Sequence[FlowRun],
    repair_runs: Sequence[FlowRun],
    statuses: Mapping[int, str],
    settings: PrefectSettings,
    now: datetime,
) -> Plan:
    """Which runs go, which stay for a repair, and the result files' cutoff (see the module).

    ``statuses``: the step registry's status of every step it holds. The newest step is the
    newest that ran (an open step may be far ahead: rollouts of a future step)."""
    if not settings.retention_on:
        return Plan()
    keep, hours = settings.keep_steps, settings.retention_hours
    newest = max((step for step, status in statuses.items() if status != "open"), default=None)
    first_kept = newest - keep + 1 if keep is not None and newest is not None else None
    ended_before = now - timedelta(hours=hours) if hours is not None else None

    def past(run: FlowRun, index: int | None) -> bool:
        if first_kept is not None and index is not None and index < first_kept:
            return True
        return ended_before is not None and run.end_time is not None and run.end_time < ended_before

    remove: list[FlowRun] = []
    spare: list[FlowRun] = []
    cutoff: datetime | None = now
    for run in step_runs:
        step = step_of(run)
        status = statuses.get(step) if step is not None else None
        finished = run.state_type in TERMINAL_STATES
        pinned = False
        if status == "done" and finished:
            if past(run, step):
                remove.append(run)
            else:
                pinned = True  # the history kept: its results stay as long
        elif not finished and status is not None and status != "done":
            # running, or about to: it may reuse or write results (a run of a step the
            # registry does not hold is another store's, on a Prefect server they share)
            pinned = True
        elif finished and status is not None:
            spare.append(run)
        if pinned and cutoff is not None:
            cutoff = None if run.created is None else min(cutoff, run.created)
    repairs = [run for run in repair_runs if run.state_type in TERMINAL_STATES]
    repairs.sort(key=lambda run: run.created or now, reverse=True)
    for rank, run in enumerate(repairs):
        if past(run, None) or (keep is not None and rank >= keep):
            remove.append(run)
    return Plan(remove=remove, spare=spare, cutoff=cutoff)


def remove_results(folder: Path, before: datetime, spare: set[str]) -> tuple[int, int]:
    """Blocking: delete the LLM tasks' result files in ``folder`` last written before
    ``before``, except those named in ``spare``; (how many, their bytes)."""
    limit = before.timestamp()
    count = size = 0
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return 0, 0
    for entry in entries:
        if entry.name in spare or not is_result_file(entry.name):
            continue
        try:
            stat = entry.stat(follow_symlinks=False)
            if not entry.is_file(follow_symlinks=False) or stat.st_mtime >= limit:
                continue
            os.unlink(entry.path)
        except FileNotFoundError:
            continue
        count += 1
        size += stat.st_size
    return count, size


async def read_runs(client: PrefectClient, flow: str) -> list[FlowRun]:
    """Every run of ``flow``, oldest first (a run created while reading comes last)."""
    runs: list[FlowRun] = []
    while True:
        page = await client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=[flow])),
            sort=FlowRunSort.EXPECTED_START_TIME_ASC,
            limit=PAGE,
            offset=len(runs),
        )
        runs.extend(page)
        if len(page) < PAGE:
            return runs


def left_unfinished(
    runs: Sequence[FlowRun], statuses: Mapping[int, str], now: datetime
) -> list[tuple[FlowRun, str]]:
    """The runs among ``runs`` not finished whose step the registry shows ``done`` or
    ``failed`` since :data:`LEFT_RUNNING_S` at least, with that status."""
    found: list[tuple[FlowRun, str]] = []
    for run in runs:
        step = step_of(run)
        status = statuses.get(step) if step is not None else None
        changed = run.state.timestamp if run.state is not None else run.created
        quiet = changed is not None and changed < now - timedelta(seconds=LEFT_RUNNING_S)
        if status in ("done", "failed") and run.state_type not in TERMINAL_STATES and quiet:
            found.append((run, status))
    return found


async def end_runs(client: PrefectClient, runs: Sequence[tuple[FlowRun, str]]) -> int:
    """Give each run its step's final state (``done``: Completed; ``failed``: Failed)."""
    for run, status in runs:
        why = f"step {step_of(run)} is {status} (amaris's step registry); Prefect missed its end"
        state: State[None] = Completed(message=why) if status == "done" else Failed(message=why)
        # Prefect's REST route (its OpenAPI), forced past the orchestration rules.
        await client.request(
            "POST",
            "/flow_runs/{id}/set_state",
            path_params={"id": run.id},
            json={"state": to_state_create(state).model_dump(mode="json"), "force": True},
        )
        log.warning("flow run %s: %s", run.name, why)
    return len(runs)


async def read_unfinished(client: PrefectClient, flow: str) -> list[FlowRun]:
    """The runs of ``flow`` pending or running (a page: a handful in practice)."""
    return await client.read_flow_runs(
        flow_filter=FlowFilter(name=FlowFilterName(any_=[flow])),
        flow_run_filter=FlowRunFilter(
            state=FlowRunFilterState(
                type=FlowRunFilterStateType(
                    any_=[StateType.PENDING, StateType.RUNNING, StateType.SCHEDULED]
                )
            )
        ),
        limit=PAGE,
    )


def _batches(ids: Sequence[UUID]) -> Iterable[list[UUID]]:
    for start in range(0, len(ids), BATCH):
        yield list(ids[start : start + BATCH])


async def delete_runs(client: PrefectClient, runs: Sequence[FlowRun]) -> int:
    """Delete ``runs``, ``BATCH`` to a request (Prefect's REST API's bulk deletion: one
    transaction; the server deletes their task runs and states with them, then their
    logs); how many (one another replica's pass deleted first is not counted)."""
    deleted = 0
    for batch in _batches([run.id for run in runs]):
        response = await client.request(
            "POST",
            BULK_DELETE,
            json={
                "flow_runs": FlowRunFilter(id=FlowRunFilterId(any_=batch)).model_dump(mode="json"),
                "limit": len(batch),
            },
        )
        deleted += len(response.json().get("deleted", []))
    return deleted


async def result_names(client: PrefectClient, runs: Sequence[FlowRun]) -> set[str]:
    """The names of the result files the task runs of ``runs`` wrote or reused."""
    names: set[str] = set()
    for batch in _batches([run.id for run in runs]):
        offset = 0
        while True:
            task_runs = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=batch)),
                limit=PAGE,
                offset=offset,
            )
            for task_run in task_runs:
                # A persisted result's state holds its record's metadata: where it is stored.
                key = getattr(task_run.state.data if task_run.state else None, "storage_key", None)
                if isinstance(key, str):
                    names.add(Path(key).name)
            offset += len(task_runs)
            if len(task_runs) < PAGE:
                break
    return names


class PrefectRetention:
    """Applies ``prefect.keep_steps`` and ``prefect.retention_hours`` to Prefect's store."""

    def __init__(
        self, settings: PrefectSettings, steps: StepRegistry, results: Path | None = None
    ) -> None:
        self._settings = settings
        self._steps = steps
        self._results = results
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """A pass every ``prefect.retention_interval_seconds`` from now on, on this loop,
        until the loop stops or the task is cancelled (with retention off, it only ends
        the runs left unfinished)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        every = self._settings.retention_interval_seconds
        while True:
            await asyncio.sleep(every)
            try:
                pruned = await self.prune()
            except Exception:  # Prefect or the registry unreachable: try again next time
                log.exception("Prefect retention failed; retrying in %s s", every)
                continue
            if pruned.runs or pruned.files or pruned.ended:
                log.info(
                    "Prefect retention: %d runs, %d result files (%d bytes) removed",
                    pruned.runs,
                    pruned.files,
                    pruned.file_bytes,
                )

    async def prune(self) -> Pruned:
        """One pass (see the module); with retention off, only the runs left unfinished."""
        now = datetime.now(UTC)
        records = await asyncio.to_thread(self._steps.list)
        statuses = {record.step: record.status for record in records}
        async with get_client() as client:
            unfinished = await read_unfinished(client, STEP_FLOW)
            ended = await end_runs(client, left_unfinished(unfinished, statuses, now))
            if not self._settings.retention_on:
                return Pruned(ended=ended)
            chosen = plan(
                await read_runs(client, STEP_FLOW),
                await read_runs(client, REPAIR_FLOW),
                statuses,
                self._settings,
                now,
            )
            files = size = 0
            if chosen.cutoff is not None:
                spare = await result_names(client, chosen.spare)
                folder = Path(self._results or get_current_settings().results.local_storage_path)
                files, size = await asyncio.to_thread(remove_results, folder, chosen.cutoff, spare)
            runs = await delete_runs(client, chosen.remove)
        return Pruned(runs=runs, files=files, file_bytes=size, ended=ended)
