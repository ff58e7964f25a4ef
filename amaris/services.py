"""Everything a running amaris holds: the long-lived objects the API and the step path use.

Built by :func:`amaris.app.wiring.build_services`; read by the API's routes.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from dataclasses import dataclass

from qdrant_client import QdrantClient

from amaris.llm.gateway import LLMGateway
from amaris.llm.providers import ChatProvider
from amaris.llm.reachability import Reachabilities
from amaris.memory.rollout_log import RolloutLog, StepRegistry
from amaris.memory.store import MemoryStore
from amaris.metrics import Metrics
from amaris.rubric.scopes import ScopeResolver
from amaris.rubric.store import RubricStore
from amaris.scoring.rollout_ids import RolloutIds
from amaris.scoring.scorer import Scorer
from amaris.settings import Settings
from amaris.steps.coordinator import StepCoordinator
from amaris.steps.runner import PipelineRunner
from amaris.trust.audit.pause import AuditPause
from amaris.trust.rule_store import PrecheckRuleStore

log = logging.getLogger("amaris")


@dataclass
class Services:
    """The long-lived objects of one amaris process."""

    settings: Settings
    qdrant: QdrantClient
    store: RubricStore
    gateway: LLMGateway
    pipeline_gateway: LLMGateway
    scorer: Scorer
    providers: dict[str, ChatProvider]
    scopes: ScopeResolver
    rollouts: RolloutLog
    steps: StepRegistry
    memory: MemoryStore
    prompts: dict[str, str]
    runner: PipelineRunner
    coordinator: StepCoordinator
    metrics: Metrics
    ids: RolloutIds
    pause: AuditPause
    """Scoring paused by a fidelity alarm (``audit.on_alarm: pause``) until acknowledged."""
    owns_qdrant: bool = True
    precheck_rules: PrecheckRuleStore | None = None
    """The pre-check's learned rules (judge canaries): ``/precheck/rules``."""
    judges: Reachabilities | None = None
    """Whether each agent's LLM endpoint answers (``server.probe_judges_seconds``)."""
    _refresher: asyncio.Task[None] | None = None
    _prober: asyncio.Task[None] | None = None

    @property
    def offline(self) -> bool:
        """True when the scorer is the offline judge."""
        return self.providers["scorer"].offline

    async def start(self) -> None:
        """Start the pipeline thread and resume steps a previous process left completing."""
        self.runner.start()
        await self.coordinator.recover()
        interval = self.settings.memory.rubric_refresh_seconds
        if interval is not None:
            self._refresher = asyncio.create_task(self._refresh_rubrics(interval))
        every = self.settings.server.probe_judges_seconds
        if self.judges is not None and every is not None:
            # In the background: an unreachable judge must not hold start-up.
            self._prober = asyncio.create_task(self.judges.run(every))
        # Everything loaded so far (Prefect, torch, the stores) lives as long as the process:
        # kept out of the collector's full passes, which otherwise stall the event loop
        # once the memory holds many points.
        gc.collect()
        gc.freeze()

    async def _refresh_rubrics(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                changed = await asyncio.to_thread(self.store.refresh)
                if self.precheck_rules is not None:
                    # Rules a step worker or another replica learned.
                    await asyncio.to_thread(self.precheck_rules.refresh)
            except Exception:  # a storage hiccup must not end the refresh loop
                log.exception("rubric refresh failed; retrying in %s s", interval)
                continue
            if changed:
                log.info("rubric version changed elsewhere for scopes %s", changed)

    async def stop(self) -> None:
        """Stop supervising steps, the pipeline thread and the gateways; close the rollout log
        and Qdrant."""
        for task in (self._refresher, self._prober):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self.coordinator.close()
        await asyncio.to_thread(self.runner.stop)
        await self.gateway.close()
        await self.pipeline_gateway.close()
        await asyncio.to_thread(self.rollouts.close)
        if self.owns_qdrant:
            await asyncio.to_thread(self.qdrant.close)


UNFREEZE_EVERY = 50
_settled = 0


def settle_heap() -> None:
    """Collect, then freeze what survives (caches, loaded models, warmed-up Prefect).

    Full collections walk every object not frozen: without this, objects a step leaves
    behind make each later full collection stall every thread, several times a step. Called
    once a step is over, after its waiters are answered: one collection per step.
    Every ``UNFREEZE_EVERY`` steps the frozen objects are collected too, so cycles that
    died after being frozen are not kept for the whole run.
    """
    global _settled
    _settled += 1
    if _settled % UNFREEZE_EVERY == 0:
        gc.unfreeze()
    gc.collect()
    gc.freeze()
