"""The gateway sends the schema fitted to the agent's ``max_tokens`` (amaris/llm/output_fit.py),
over HTTP to the fake LLM (the ``fake_llm`` fixture); the fit itself: test_output_fit.py."""

from __future__ import annotations

from pathlib import Path

from amaris.agents import IndividualAnalysis
from amaris.llm.output_fit import RESERVE_TOKENS
from amaris.llm.schema import strict_schema
from amaris.sim.judge_server import Reply
from tests.support.fake_llm import FakeLLM
from tests.support.gateway import MESSAGES, open_gateway
from tests.support.output_tokens import reply_tokens


async def test_requests_carry_the_schema_fitted_to_the_agents_max_tokens(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    reply = IndividualAnalysis.model_validate(
        {
            "rollout_id": "r1",
            "overall_assessment": {"quality": "good"},
            "performance_at_stage": {"meets_expectations": True},
            "reward_hacking_analysis": {"detected": False, "severity": "none"},
            "rubric_evaluation": {"score_justified": True},
        }
    ).model_dump_json()
    fake_llm.push(Reply(content=reply), Reply(content=reply), Reply(content=reply))
    overrides = {"agents.analyzer.max_tokens": 640, "agents.summarizer.structured_output": "none"}
    async with open_gateway(tmp_path, fake_llm, **overrides) as gateway:
        for agent in ("analyzer", "scorer", "summarizer"):
            await gateway.structured(agent, MESSAGES, IndividualAnalysis)
    capped, uncapped, unconstrained = fake_llm.requests
    assert capped["max_tokens"] == 640
    sent = capped["response_format"]["json_schema"]["schema"]
    assert reply_tokens(sent) <= 640 - RESERVE_TOKENS
    # no cap: the agent's own bounds; no schema sent: nothing to fit (the parse clips)
    assert "max_tokens" not in uncapped
    assert uncapped["response_format"]["json_schema"]["schema"] == strict_schema(IndividualAnalysis)
    assert "response_format" not in unconstrained
