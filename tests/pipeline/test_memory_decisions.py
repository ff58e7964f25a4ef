"""Memory changes the offline updater's decisions: a resurgent behaviour is re-penalised at
once, a pitfall retired before is not flip-flopped, a recurring finding outweighs a one-off;
and the memory ablation of a small simulation orders the modes as the method claims."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from amaris.agents.prompts import load_prompts
from amaris.app.wiring import create_app
from amaris.cli.commands.simulate import MODES
from amaris.cli.simulate import DEFAULT_DYNAMIC_LIMIT, DEFAULT_STATIC_STEPS, SimulatedSource
from amaris.offline import tags
from amaris.offline.recall import histories
from amaris.settings import PromptsSettings
from amaris.sim.driver import run
from amaris.sim.metrics import memory_outcomes
from amaris.sim.policy import Policy
from tests.support.fake_llm import serve_in_thread
from tests.support.offline_step import ANCHOR, criterion, step_summary, update
from tests.support.settings import make_settings

HEDGING = tags.BY_TAG["hedging"]
ADDED_AT_1 = {
    "type": "rubric_update",
    "step": 1,
    "text": "Step 1 rubric update (CORRECTIVE, published): Step 1: pitfall added against "
    "hedging: hedging in 3 rollouts (9%) and no criterion penalises it. add  "
    f"{HEDGING.pitfall} -1.0",
}
RETIRED_AT_3 = {
    "type": "rubric_update",
    "step": 3,
    "text": "Step 3 rubric update (MAINTENANCE, published): Step 3: pitfall retired against "
    f"hedging (R2): absent from this step. retire R2 {HEDGING.pitfall}",
}


def _with(behaviours: list[dict[str, Any]]) -> dict[str, Any]:
    summary = step_summary()
    return {**summary, "aggregated_reward_hacking": {"detected": True, "behaviours": behaviours}}


ONE_HEDGE = _with([{"tag": "hedging", "count": 1, "share": 0.03, "rollout_ids": ["r5"]}])
"""A step where one rollout of 32 hedges: below the threshold to act on a count alone."""
NOTHING = _with([])


def _added(proposal: Any) -> list[str]:
    return [m.text for m in proposal.rubric_modifications if m.action == "add"]


def test_resurgent_behaviour_is_re_penalised_at_once() -> None:
    alone = update(ONE_HEDGE, [ANCHOR])
    assert alone.rubric_modifications == []
    assert alone.rationale.evidence == ["hedging in 1 rollouts (3%): below the threshold to act"]

    proposal = update(ONE_HEDGE, [ANCHOR], dynamic_memory=[RETIRED_AT_3, ADDED_AT_1])
    assert proposal.update_strategy == "CORRECTIVE"
    [added] = proposal.rubric_modifications
    assert (added.action, added.text, added.weight) == ("add", HEDGING.pitfall, -1.0)
    assert added.reason.startswith("pitfall added against hedging: resurgent: ")
    assert "penalised at step 1, retired at step 3" in added.reason
    assert "resurgent" in proposal.rationale.summary


def test_only_published_updates_count_as_history() -> None:
    rejected = {**RETIRED_AT_3, "text": RETIRED_AT_3["text"].replace("published", "rejected")}
    assert histories([ADDED_AT_1, rejected])["hedging"].retired == set()
    assert update(ONE_HEDGE, [ANCHOR], dynamic_memory=[ADDED_AT_1, rejected]).rubric_modifications
    # Added at 1, memory shows it: recurring, not resurgent.
    reason = update(ONE_HEDGE, [ANCHOR], dynamic_memory=[ADDED_AT_1]).rubric_modifications[0]
    assert reason.reason.startswith("pitfall added against hedging: recurring: ")


def test_recurring_finding_outweighs_a_one_off() -> None:
    seen = {"step": 5, "text": "Step 5: mean reward 0.8; reward hacking: hedging (3%)"}
    proposal = update(ONE_HEDGE, [ANCHOR], static_memory=[seen])
    assert _added(proposal) == [HEDGING.pitfall]
    assert "recurring" in proposal.rubric_modifications[0].reason
    assert "also in memory at step 5" in proposal.rubric_modifications[0].reason
    other = {"step": 5, "text": "Step 5: mean reward 0.8; reward hacking: sycophancy (9%)"}
    assert update(ONE_HEDGE, [ANCHOR], static_memory=[other]).rubric_modifications == []


def test_idle_pitfall_is_retired_without_memory_and_kept_with_it() -> None:
    rubric = [ANCHOR, criterion("R4", HEDGING.pitfall, -1.0)]
    retired = update(NOTHING, rubric).rubric_modifications
    assert [(m.action, m.criterion_id) for m in retired] == [("retire", "R4")]
    assert retired[0].reason.startswith("pitfall retired against hedging (R4)")

    # Retired before and re-added: no flip-flop without new evidence.
    kept = update(NOTHING, rubric, dynamic_memory=[ADDED_AT_1, RETIRED_AT_3])
    assert kept.rubric_modifications == []
    assert any("retired at step 3 and re-added" in e for e in kept.rationale.evidence)
    # Added against it before: the pitfall is why the behaviour is absent.
    why = update(NOTHING, rubric, dynamic_memory=[ADDED_AT_1])
    assert why.rubric_modifications == []
    assert any("the pitfall is probably why" in e for e in why.rationale.evidence)
    # Seen recently (step 3, update at step 4): kept; seen long ago: retired.
    recent = {"type": "finding", "step": 3, "text": "hedging: hedging instead of answering"}
    assert update(NOTHING, rubric, dynamic_memory=[recent]).rubric_modifications == []
    old = {**recent, "step": 0}
    assert [
        m.action for m in update(NOTHING, rubric, dynamic_memory=[old]).rubric_modifications
    ] == ["retire"]
    # The behaviour is present this step: never retired.
    assert update(ONE_HEDGE, rubric).rubric_modifications == []


def test_the_llm_updater_is_given_the_same_three_decisions() -> None:
    # The LLM updater gets the memory in its payload (tasks/update_rubric.py); its prompt
    # must ask for what the offline rules do, in words its reasons can be checked by.
    prompt = load_prompts(PromptsSettings())["updater"]
    assert "Memory decides in three cases" in prompt
    for case in ("- Resurgence:", "- Flip-flops:", "- Recurrence:"):
        assert case in prompt
    assert 'start its reason with "resurgent:"' in prompt


# -- the ablation: a small simulation once per memory mode -----------------------------------

STEPS, PER_STEP, SEED = 10, 32, 0
"""The default simulation of ``amaris simulate`` (10 steps x 32 rollouts, seed 0)."""


def _simulate(tmp_path: Path, mode: str) -> dict[str, Any]:
    """The simulation under ``mode``, against a fresh in-process server (real uvicorn in a
    thread, real Prefect flows, Qdrant in memory); its memory outcomes."""
    static, dynamic = MODES[mode]
    settings = make_settings(
        tmp_path / mode,
        **{
            "pipeline.rollouts_per_step": None,
            "memory.static_memory_steps": DEFAULT_STATIC_STEPS if static else 0,
            "memory.dynamic_memory_limit_per_query": DEFAULT_DYNAMIC_LIMIT if dynamic else 0,
        },
    )
    policy = Policy(SEED, PER_STEP, STEPS, learning_rate=2.0)
    with serve_in_thread(create_app(settings, qdrant_location=":memory:")) as url:
        result = asyncio.run(run(url, SimulatedSource(policy, STEPS), label=mode))
    return memory_outcomes(result)


@pytest.mark.slow  # four simulations of 10 steps, 40 step runs: not the quick loop
@pytest.mark.usefixtures("prefect_harness")
def test_memory_ablation_orders_the_modes(tmp_path: Path) -> None:
    outcomes = {mode: _simulate(tmp_path, mode) for mode in MODES}
    none = outcomes["none"]
    assert none["reversals"] >= 2, outcomes
    for mode in ("static", "dynamic", "both"):
        assert outcomes[mode]["reversals"] <= none["reversals"] / 2, outcomes
    # Behaviours come back after their pitfall is retired; hedging returns after the static
    # window has lost it: only dynamic retrieval connects it to its old penalty.
    assert none["resurgent_unpenalised_steps"] >= 2, outcomes
    assert outcomes["static"]["resurgent_unpenalised_steps"] >= 2, outcomes
    for mode in ("dynamic", "both"):
        assert outcomes[mode]["resurgent_unpenalised_steps"] <= 1, outcomes
    assert outcomes["both"]["reward_gap"] >= none["reward_gap"], outcomes
