"""The scorer's system message per kind of rollout: the template's trajectory sections
(``[trajectory]`` ... ``[/trajectory]``) are sent for an agent's trajectory only, a template
without them as written, and a malformed section fails where the template is loaded.

The real gateway with a scripted provider in process (tests/support/scripted_llm.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import QdrantClient

from amaris.agents.prompts import (
    CONTEXT_HEADING,
    TRAJECTORY_CLOSE,
    TRAJECTORY_OPEN,
    PromptError,
    load_prompts,
    render_template,
)
from amaris.llm.gateway import LLMGateway
from amaris.models import ScoreRequest
from amaris.rubric.model import Criterion, RubricVersion
from amaris.rubric.store import RubricStore
from amaris.scoring.scorer import Scorer
from amaris.settings import PromptsSettings, load_settings
from tests.support.scripted_llm import ScriptedProvider, gateway, scorer_prompt, verdicts

A1 = Criterion(id="A1", text="The final answer is correct.", weight=1.0, is_anchor=True)
RUBRIC = RubricVersion(version=1, origin="config", anchors=(A1,))
TRAJECTORY_PARAGRAPH = 'A rollout with "turns" is an agent\'s trajectory:'
TURNS_PARAGRAPH = 'For a trajectory, each entry also has "turns" after the score:'


def plain(output: str = "4") -> ScoreRequest:
    body = {"id": f"p-{output}", "input": "What is 2 + 2?", "output": output}
    return ScoreRequest.model_validate({"rollout": body, "metadata": {"current_step": 1}})


def trajectory(answer: str = "Fixed.") -> ScoreRequest:
    body = {
        "id": f"t-{answer}",
        "messages": [
            {"role": "user", "content": "Fix the failing test."},
            {"role": "assistant", "content": answer},
        ],
        "outcome": {"tests_passed": True},
    }
    return ScoreRequest.model_validate({"rollout": body, "metadata": {"current_step": 1}})


@pytest.fixture
async def systems(tmp_path: Path) -> AsyncIterator[Any]:
    """Judges requests with a scorer on ``prompts.scorer`` (the built-in when None) and
    returns the system message of each call."""
    opened: list[tuple[LLMGateway, QdrantClient]] = []

    async def judge(template: str | None, *requests: ScoreRequest) -> list[str]:
        overrides: dict[str, Any] = {}
        if template is not None:
            path = tmp_path / "scorer.txt"
            path.write_text(template, encoding="utf-8")
            overrides["prompts.scorer"] = str(path)
        settings = load_settings(None, **overrides)
        provider = ScriptedProvider(default=verdicts(("A1", 4)))
        qdrant = QdrantClient(":memory:")
        llm = gateway(settings, provider)
        opened.append((llm, qdrant))
        store = RubricStore(qdrant, "rubrics", None)
        scorer = Scorer(settings.scoring, llm, store, scorer_prompt(settings))
        for request in requests:
            assert (await scorer.judge(request, RUBRIC)).failure is None
        return [call.messages[0]["content"] for call in provider.calls]

    yield judge
    for llm, qdrant in opened:
        await llm.close()
        qdrant.close()


def instructions(system: str) -> str:
    """The template part of a scorer's system message (before the rubric's block)."""
    return system[: system.index(CONTEXT_HEADING)]


async def test_a_plain_rollouts_prompt_has_no_trajectory_paragraph_nor_marker(
    systems: Any,
) -> None:
    first, second = await systems(None, plain("4"), plain("It is 4."))
    assert first == second  # calls under one rubric differ only in the rollout message
    text = instructions(first)
    assert TRAJECTORY_PARAGRAPH not in text and TURNS_PARAGRAPH not in text
    assert TRAJECTORY_OPEN not in text and TRAJECTORY_CLOSE not in text
    assert "\n\n\n" not in first  # no doubled blank line where the sections were
    # The rest of the instructions is there, the reply format last.
    assert "Standing rule:" in text
    assert text.rstrip().endswith('"score": <0-4>}]}')


async def test_a_trajectorys_prompt_has_its_paragraphs_and_no_marker(systems: Any) -> None:
    first, second = await systems(None, trajectory("Fixed."), trajectory("Done, tests pass."))
    assert first == second
    text = instructions(first)
    assert TRAJECTORY_PARAGRAPH in text and TURNS_PARAGRAPH in text
    assert TRAJECTORY_OPEN not in text and TRAJECTORY_CLOSE not in text
    assert "\n\n\n" not in first
    # Each paragraph stands alone, between blank lines, where the template put it.
    assert f"\n\n{TRAJECTORY_PARAGRAPH}" in text and f"\n\n{TURNS_PARAGRAPH}" in text
    assert text.index(TRAJECTORY_PARAGRAPH) < text.index("Standing rule:")


async def test_a_template_without_markers_is_sent_as_written(systems: Any) -> None:
    # Inline brackets are not a marker, and its blank lines stay as they are.
    template = "Judge the [trajectory] and the answer.\n\n\n\nReply in JSON.\n"
    plain_system, trajectory_system = await systems(template, plain(), trajectory())
    for system in (plain_system, trajectory_system):
        assert system.startswith(f"{template.rstrip()}\n\n{CONTEXT_HEADING}\n")


@pytest.mark.parametrize(
    ("template", "line", "error"),
    [
        ("Judge.\n\n[trajectory]\nOnly for a trajectory.\n", 3, "never closed"),
        ("[trajectory]\nA.\n[trajectory]\nB.\n[/trajectory]\n", 3, "do not nest"),
        ("Judge.\n[/trajectory]\n", 2, "no section open"),
    ],
)
def test_a_malformed_section_fails_at_load_naming_the_agent_and_line(
    tmp_path: Path, template: str, line: int, error: str
) -> None:
    path = tmp_path / "mine.txt"
    path.write_text(template, encoding="utf-8")
    with pytest.raises(PromptError) as raised:
        load_prompts(PromptsSettings(scorer=path))
    message = str(raised.value)
    assert message.startswith(f"prompts.scorer ({path}): line {line}: ")
    assert error in message


async def test_a_scorer_built_on_a_malformed_template_fails_when_built() -> None:
    settings = load_settings(None)
    qdrant = QdrantClient(":memory:")
    llm = gateway(settings, ScriptedProvider())
    try:
        with pytest.raises(PromptError, match=r"prompts\.scorer .*line 1: .*never closed"):
            Scorer(settings.scoring, llm, RubricStore(qdrant, "r", None), "[trajectory]\nA.\n")
    finally:
        await llm.close()
        qdrant.close()


@pytest.mark.parametrize(
    ("template", "for_plain", "for_trajectory"),
    [
        # between paragraphs: one blank line left either way
        ("A.\n\n[trajectory]\nT.\n[/trajectory]\n\nB.\n", "A.\n\nB.\n", "A.\n\nT.\n\nB.\n"),
        # at the end: no trailing blank line
        ("A.\n\n[trajectory]\nT.\n[/trajectory]\n", "A.\n", "A.\n\nT.\n"),
        # at the start, markers spaced from their section, CRLF line ends
        (
            "[trajectory]\r\n\r\nT.\r\n\r\n[/trajectory]\r\n\r\nB.\r\n",
            "B.\r\n",
            "T.\r\n\r\nB.\r\n",
        ),
        # within a paragraph: its lines joined
        ("A\n[trajectory]\nT\n[/trajectory]\nB\n", "A\nB\n", "A\nT\nB\n"),
    ],
)
def test_sections_leave_a_clean_blank_line_layout(
    template: str, for_plain: str, for_trajectory: str
) -> None:
    assert render_template(template, trajectory=False) == for_plain
    assert render_template(template, trajectory=True) == for_trajectory
