"""The audit judge's re-grading: the scorer's prompt and judge code on
the ``auditor`` agent's endpoint, the served and audit verdicts side by side, and no reward
made up when the auditor gives none. The LLM is scripted at the gateway seam."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
from qdrant_client import QdrantClient

from amaris.llm.call_log import CallLog
from amaris.llm.gateway import LLMGateway
from amaris.memory.records import RolloutRecord
from amaris.rubric.model import Criterion, RubricVersion
from amaris.rubric.store import RubricStore
from amaris.scoring.scorer import Scorer
from amaris.settings import load_settings
from amaris.trust.audit.regrade import regrade_all
from amaris.trust.audit.sampling import Drawn
from tests.support.scripted_llm import ScriptedProvider, scorer_prompt, verdicts

A1 = Criterion(id="A1", text="The final answer is correct.", weight=1.0, is_anchor=True)
R1 = Criterion(id="R1", text="The reply pads.", weight=-1.0, is_anchor=False)
RUBRIC = RubricVersion(version=2, origin="config", anchors=(A1,), adaptive=(R1,))


def record(rid: str, score: float) -> RolloutRecord:
    return RolloutRecord.model_validate(
        {
            "rollout": {"id": rid, "input": "What is 6 * 7?", "output": f"{rid}: 42"},
            "score": score,
            "status": "scored",
            "rubric_version": 2,
            "step": 5,
            "verdicts": [
                {"id": "A1", "text": A1.text, "weight": 1.0, "verdict": 4},
                {"id": "R1", "text": R1.text, "weight": -1.0, "verdict": 0},
            ],
        }
    )


async def test_the_auditor_grades_with_the_scorers_prompt_on_its_own_endpoint(
    tmp_path: Path,
) -> None:
    settings = load_settings(
        None, **{"memory.path": str(tmp_path), "agents.auditor.model": "audit-model"}
    )
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    refused = openai.BadRequestError(
        "refused", response=httpx.Response(400, request=request), body=None
    )
    auditor = ScriptedProvider(script=[verdicts(("A1", 1), ("R1", 4)), refused])
    scorer_side = ScriptedProvider()
    gateway = LLMGateway(settings, {"scorer": scorer_side, "auditor": auditor}, CallLog(None))
    qdrant = QdrantClient(":memory:")
    try:
        scorer = Scorer(
            settings.scoring,
            gateway,
            RubricStore(qdrant, "rubrics", None),
            scorer_prompt(settings),
            agent="auditor",
        )
        sample = [Drawn(record("hack", 1.0), True, 1.0), Drawn(record("lost", 0.75), False, 1.0)]
        graded, lost = await regrade_all(scorer, sample, [RUBRIC, RUBRIC])
    finally:
        await gateway.close()
        qdrant.close()
    # Every call went to the auditor's endpoint, none to the scorer's, with its prompt.
    assert scorer_side.calls == [] and len(auditor.calls) == 2
    assert auditor.calls[0].messages[0]["content"].startswith(scorer_prompt(settings)[:200])
    assert auditor.calls[0].rollout()["output"] == "hack: 42"
    assert graded.training == 1.0
    assert graded.audit == 0.0  # A1 at 1/4, the padding pitfall at 4/4: (0.25 - 1) clamps to 0
    assert [(p.id, p.training, p.audit) for p in graded.criteria] == [
        ("A1", 4.0, 1.0),
        ("R1", 0.0, 4.0),
    ]
    assert graded.top_tail and graded.failure is None
    # No verdict: no audit reward, the reason kept.
    assert lost.audit is None and lost.failure is not None
    assert lost.failure.startswith("judge_unavailable")
    assert gateway.ledger.for_step(5)[("auditor", "audit-model")].calls == 1
