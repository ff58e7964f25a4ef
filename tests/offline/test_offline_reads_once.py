"""The offline judge reads a scorer request's data once (the JSON of a long rollout is
costly to parse), and selects a criterion's rule once, then remembers it."""

from __future__ import annotations

import pytest

import amaris.offline.judge
import amaris.offline.sampling
from amaris.agents.prompts import read_data
from amaris.offline.heuristics import select_behaviour
from amaris.offline.sampling import VerdictSampler
from amaris.rubric.model import Criterion, RubricVersion
from amaris.scoring.judge_protocol import judge_messages
from tests.support.degenerate import QUESTION, REFERENCE, mixed


def scorer_messages() -> list[dict[str, str]]:
    rubric = RubricVersion(
        version=1,
        origin="config",
        anchors=(
            Criterion(id="A1", text="The final answer is correct.", weight=1.0, is_anchor=True),
        ),
    )
    fields = {"input": QUESTION, "supplemental_context": REFERENCE, "output": mixed(10_000)}
    return judge_messages("You judge.", rubric, fields)


def test_at_temperature_zero_the_sampler_leaves_the_data_to_the_judge(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[int] = []

    def counted(messages: list[dict[str, str]]) -> object:
        reads.append(len(messages))
        return read_data(messages)

    monkeypatch.setattr(amaris.offline.sampling, "read_data", counted)
    monkeypatch.setattr(amaris.offline.judge, "read_data", counted)
    messages = scorer_messages()
    sampler = VerdictSampler()
    assert sampler.reply(messages, 0.0, False, 0) is None
    assert reads == []  # not parsed here as well as by the judge
    content = amaris.offline.judge.respond(messages)
    assert '"verdicts"' in content and len(reads) == 1
    sampled = sampler.reply(messages, 0.7, False, 0)  # a doubting judge reads it itself
    assert sampled is not None and len(reads) == 2
    assert sampler.reply([{"role": "user", "content": "no data"}], 0.7, False, 0) is None


def test_a_criterion_s_rule_is_selected_and_remembered() -> None:
    criterion = "The response does not hedge between several answers."
    first = select_behaviour(criterion)
    assert first is not None and first[0].name == "several answers"
    assert first[1] == criterion.index("hedge")
    assert select_behaviour(criterion) is first  # remembered, not searched again
    assert select_behaviour("Something no rule names.") is None
