"""The pipeline tasks' blocks carry amaris's models (tasks/blocks.py, issue 24): the data
block writes each as its JSON, byte for byte what the tasks sent when they dumped the
models themselves, and the offline agents read the same JSON back."""

from __future__ import annotations

from amaris.agents.payloads import RolloutData
from amaris.agents.prompts import agent_messages, data_message, read_data
from amaris.offline.agents import handle_analyzer
from amaris.tasks.blocks import CriteriaContext, SummaryInput
from amaris.tasks.models import AgentCriterion, ScoredAnalysis

CRITERIA = [
    AgentCriterion(
        id="c1", text="Answers — in «full»", weight=1.0, kind="requirement", is_anchor=True
    ),
    AgentCriterion(
        id="c2", text="Hard-codes\u2028the answer", weight=-0.5, kind="pitfall", is_anchor=False
    ),
]
ROLLOUT: RolloutData = {"id": "r1", "input": "2+2?", "supplemental_context": "4", "output": "5 ✓"}
# An analysis as the offline analyzer writes one, with its rollout's score.
ANALYSIS = ScoredAnalysis(
    **handle_analyzer(
        {
            "criteria": [c.data() for c in CRITERIA],
            "metadata": None,
            "rollout": ROLLOUT,
            "score": 0.25,
            "verdicts": [],
            "group": [],
        }
    ).model_dump(),
    score=0.25,
)


def test_a_block_of_models_is_written_as_the_models_json() -> None:
    context: CriteriaContext = {"criteria": CRITERIA}
    data: SummaryInput = {"step": 3, "metadata": {"run": "r"}, "analyses": [ANALYSIS]}
    dumped_context = {"criteria": [c.model_dump(mode="json") for c in CRITERIA]}
    dumped_data = {**data, "analyses": [ANALYSIS.model_dump(mode="json")]}
    assert data_message("summarizer", context) == data_message("summarizer", dumped_context)
    messages = agent_messages("summarizer", "Summarise.", context, data)
    assert messages == agent_messages("summarizer", "Summarise.", dumped_context, dumped_data)
    assert read_data(messages) == {"agent": "summarizer", **dumped_context, **dumped_data}
