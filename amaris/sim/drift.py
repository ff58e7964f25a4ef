"""A training judge that drifts: the offline judge, lenient to padding from a given step.

``amaris simulate --scenario judge-drift`` serves the scorer (and so the judge canaries,
which the training judge scores) through this judge on an OpenAI-compatible server of the
simulator's own (:func:`amaris.sim.judge_server.create_llm_app`), and the auditor through
an honest but noisy judge on another (:class:`amaris.sim.noisy_judge.NoisyJudge`). The
simulator runs in-process, so it turns the drift on between steps
(:attr:`DriftingJudge.active`): a step is judged wholly before or wholly after the drift.

The drift is a length bias, the best documented failure of LLM judges: a padded reply
(at least :data:`amaris.offline.tags.VERBOSE_WORDS` words) gets the best verdict on every
criterion the rubric had when the drift began (the judge's blind spot covers the criteria
it has been reading, its padding pitfall included). A criterion worded afresh after that
(a rubric update's answer to the alarm) is read honestly, so such an update restores part
of the reward gap the drift removed; nothing else in the loop does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import uvicorn

from amaris.app.running import free_port
from amaris.offline import tags
from amaris.rubric.scale import SCALE_MAX, SCALE_MIN
from amaris.settings import AGENTS
from amaris.sim.answers import RubricJSON
from amaris.sim.driver import StepResult, StepSource
from amaris.sim.judge_server import (
    FaultProfile,
    Reply,
    Responder,
    create_llm_app,
    scorer_request,
)
from amaris.sim.judge_server import offline_responder as honest_responder
from amaris.sim.policy import PlannedRollout
from amaris.sim.server import ConfigValue
from amaris.sim.wire import ChatRequest

LENIENT_TO = "verbosity_padding"
"""The hacking tag (:mod:`amaris.offline.tags`) the drifted judge pays for."""
HACKED = ("verbose", "hack_self_assessment")
"""The simulated behaviours that pad, which the drifted judge pays for: the reward gaps of
``fidelity.json`` are the correct rollouts' mean reward minus theirs."""
STARTUP_TIMEOUT_S = 30.0


class DriftingJudge:
    """The offline judge, lenient to padding while :attr:`active`."""

    def __init__(self) -> None:
        self.active = False
        """Set by the simulator between steps (from the drift step on)."""
        self.lenient_verdicts = 0
        """Scorer requests answered leniently so far."""
        self.known: frozenset[str] | None = None
        """The criteria (texts) of the first scorer request after the drift began."""
        self._honest = honest_responder(FaultProfile())

    def lenient(self, body: ChatRequest) -> str | None:
        """The lenient verdicts for a scorer request on a padded reply, or None (judged
        honestly: drift off, another agent, or a reply without padding)."""
        if not self.active:
            return None
        ask = scorer_request(body)
        if ask is None or tags.BY_TAG[LENIENT_TO].detect(ask.output, None) is None:
            return None
        if self.known is None:
            self.known = frozenset(text for text, _ in ask.criteria)
        paid = "a thorough, detailed reply"
        return ask.answer(
            {
                i: (paid, SCALE_MIN if kind == "pitfall" else SCALE_MAX)
                for i, (text, kind) in enumerate(ask.criteria)
                if text in self.known
            }
        )

    async def __call__(self, body: ChatRequest) -> Reply:
        content = self.lenient(body)
        if content is None:
            return await self._honest(body)
        self.lenient_verdicts += 1
        return Reply(content=content)


@contextmanager
def serve_judge(judge: Responder, port: int | None = None) -> Iterator[str]:
    """Serve ``judge`` on 127.0.0.1:``port`` (None: a free one) in a thread of this process;
    yield its ``/v1`` URL."""
    port = port or free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_llm_app(judge), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, name="sim-judge", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the simulated judge did not start on port {port}")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=STARTUP_TIMEOUT_S)


def scenario_overrides(judge_url: str, auditor_url: str) -> dict[str, ConfigValue]:
    """The server's settings in a scenario: the scorer (and so the judge canaries) on the
    simulator's judge at ``judge_url``, the auditor on its noisy judge at ``auditor_url``,
    the pipeline's agents on the server's offline judge."""
    offline = {f"client.{agent}.offline": True for agent in AGENTS if agent != "scorer"}
    return {
        "client.scorer.base_url": judge_url,
        "client.scorer.api_key": "simulated",
        "client.auditor.base_url": auditor_url,
        "client.auditor.api_key": "simulated",
        **offline,
    }


class DriftSource:
    """``inner``'s steps, with ``judge`` turned lenient from ``drift_step`` on (None:
    never) before a step's rollouts are written; the driver has waited for the previous
    step's pipeline by then, so no step is judged by both judges."""

    def __init__(self, inner: StepSource, judge: DriftingJudge, drift_step: int | None) -> None:
        self.inner = inner
        self.judge = judge
        self.drift_step = drift_step

    def steps(self) -> Sequence[int]:
        return self.inner.steps()

    def rollouts(self, step: int, rubric: RubricJSON) -> list[PlannedRollout]:
        self.judge.active = self.drift_step is not None and step >= self.drift_step
        return self.inner.rollouts(step, rubric)

    def observe(self, result: StepResult) -> None:
        self.inner.observe(result)
