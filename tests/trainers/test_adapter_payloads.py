"""The trainer side's typed payloads (amaris/integrations, amaris.client) against the
server's models: the trainer side cannot import the server (the light client install), so
its TypedDicts spell the server's fields again, as the client's JSON forms of the request
models and its step answers do; these tests keep them in step."""

from __future__ import annotations

import json
from typing import Any, Literal, Required, get_args, get_origin, get_type_hints

from pydantic import BaseModel

from amaris.agents.schemas import AggregatedBehaviour, Strategy
from amaris.client import (
    CanaryAnswer,
    DroppedAnswer,
    HackingAnswer,
    MessageBody,
    MetadataBody,
    RolloutBody,
    ScopeAnswer,
    TextPartBody,
    ToolCallBody,
    ToolFunctionBody,
    WaitAnswer,
)
from amaris.client.rewards import ServerAnswer
from amaris.integrations.verl import RewardKwargs, _run
from amaris.models import GetRewardBody, Rollout, TrainingMetadata, UpdateKind
from amaris.steps.outcomes import Dropped, ScopeOutcome, WaitResult
from amaris.trajectory import Message, TextPart, ToolCall, ToolFunction
from amaris.trust.rubric_canary.report import CanaryProbe, CanaryReport
from api.routes.openrlhf import GetRewardRequest, RunMetadata, UnscoredBatchResponse
from api.routes.steps import WaitResponse


def test_the_body_sends_fields_the_server_reads() -> None:
    assert set(GetRewardBody.__annotations__) <= set(GetRewardRequest.model_fields)


BODIES: list[tuple[Any, type[BaseModel]]] = [
    (RolloutBody, Rollout),
    (MetadataBody, TrainingMetadata),
    (MessageBody, Message),
    (ToolCallBody, ToolCall),
    (ToolFunctionBody, ToolFunction),
    (TextPartBody, TextPart),
]
"""Each JSON form the client takes and the request model it spells."""


def test_the_clients_json_forms_spell_the_request_models() -> None:
    # RewardClient takes the models or their JSON: a field of one is a key of the other.
    for body, model in BODIES:
        hints = get_type_hints(body, include_extras=True)
        assert list(hints) == list(model.model_fields), body
        required = {name for name, info in model.model_fields.items() if info.is_required()}
        assert {name for name, hint in hints.items() if get_origin(hint) is Required} == required


def test_the_trajectory_forms_have_the_servers_vocabulary() -> None:
    # Every choice the server's trajectory models take (role, finish reason, the kinds of a
    # tool call and of a content part), and none more.
    vocabularies: list[tuple[Any, type[BaseModel], str]] = [
        (MessageBody, Message, "role"),
        (RolloutBody, Rollout, "finish_reason"),
        (ToolCallBody, ToolCall, "type"),
        (TextPartBody, TextPart, "type"),
    ]
    for body, model, name in vocabularies:
        server = _literal(model.model_fields[name].annotation)
        assert _literal(get_type_hints(body)[name]) == server, (body, name)


def test_the_answer_reads_fields_the_server_writes() -> None:
    # UnscoredBatchResponse is GetRewardResponse with the 503's detail.
    assert set(ServerAnswer.__annotations__) <= set(UnscoredBatchResponse.model_fields)


def test_verl_passes_the_whole_run_description_in_its_order() -> None:
    # reward_kwargs' run fields go to /get_reward as amaris_metadata: a field added to
    # RunMetadata must be read from reward_kwargs too.
    fields = list(RunMetadata.model_fields)
    assert set(fields) <= set(RewardKwargs.__annotations__)
    kwargs: RewardKwargs = {
        "model_size": "7B",
        "total_steps": 10,
        "url": "http://x",
        "high_level_goal": "g",
        "other_context": "c",
    }
    run = _run(kwargs)
    assert run == {
        "high_level_goal": "g",
        "model_size": "7B",
        "total_steps": 10,
        "other_context": "c",
    }
    assert list(run) == fields
    assert _run({"url": "http://x"}) is None


ANSWERS: list[tuple[Any, type[BaseModel], set[str]]] = [
    (WaitAnswer, WaitResponse, set()),
    (ScopeAnswer, ScopeOutcome, set()),
    (CanaryAnswer, CanaryReport, {"probes"}),  # the answer leaves the canary's probes out
    (HackingAnswer, AggregatedBehaviour, set()),
    (DroppedAnswer, Dropped, set()),
]
"""Each type of the client's step answer, the server's model it spells, the fields the
answer leaves out."""


def test_the_step_answer_spells_the_servers_models() -> None:
    for answer, model, left_out in ANSWERS:
        assert set(get_type_hints(answer)) == set(model.model_fields) - left_out, answer


def _literal(hint: Any) -> set[Any]:
    """The values of the Literal in ``hint`` (through Required, Annotated and | None)."""
    while get_origin(hint) is not Literal:
        hint = next(arg for arg in get_args(hint) if arg is not type(None))
    return set(get_args(hint))


def test_the_step_answer_has_the_servers_vocabulary() -> None:
    scope = get_type_hints(ScopeAnswer)
    # One definition of the update outcomes and of the wait status, on both sides.
    assert scope["outcome"] == UpdateKind
    assert get_type_hints(WaitAnswer)["status"] == WaitResponse.model_fields["status"].annotation
    assert _literal(scope["strategy"]) == _literal(Strategy)
    canary = CanaryReport.model_fields["outcome"].annotation
    assert _literal(get_type_hints(CanaryAnswer)["outcome"]) == _literal(canary)
    assert get_type_hints(WaitAnswer)["mode"] == WaitResponse.model_fields["mode"].annotation


def test_the_servers_wait_answer_is_the_clients_wait_answer() -> None:
    # Every field of a scope's outcome set: the JSON the route answers, key for key.
    canary = CanaryReport(
        outcome="refused",
        reason="gap shrank",
        probes=[CanaryProbe(id="p", kind="hack", group="g", side="fail", current=1, candidate=1)],
        judge_calls=3,
        budget=9,
        current_gap=0.5,
        candidate_gap=0.1,
        anchors_gap=0.4,
    )
    hacking = AggregatedBehaviour(tag="hedging", description="d", count=2, share=0.5)
    scope = ScopeOutcome(
        outcome="rejected",
        version=3,
        base_version=3,
        strategy="CORRECTIVE",
        reason="the canary refused it",
        canary=canary,
        retired_uninformative=["C1"],
        rollouts=4,
        hacking=[hacking],
        dropped=[Dropped(agent="analyzer", part="rollout r1", reason="ValueError: x")],
    )
    unasked = ScopeOutcome(
        outcome="skipped", version=1, base_version=1, rollouts=0, hacking=[], dropped=[]
    )
    result = WaitResult(
        status="rejected", mode="per_instance", step=7, scopes={"a": scope, "b": unasked}
    )
    answer = json.loads(WaitResponse.model_validate(result, from_attributes=True).model_dump_json())
    assert set(answer) == set(get_type_hints(WaitAnswer))
    assert set(answer["scopes"]["a"]) == set(get_type_hints(ScopeAnswer))
    assert set(answer["scopes"]["a"]["canary"]) == set(get_type_hints(CanaryAnswer))
    assert set(answer["scopes"]["a"]["hacking"][0]) == set(get_type_hints(HackingAnswer))
    assert set(answer["scopes"]["a"]["dropped"][0]) == set(get_type_hints(DroppedAnswer))
    assert answer["scopes"]["b"] == {
        "outcome": "skipped",
        "reason": None,
        "version": 1,
        "base_version": 1,
        "rollouts": 0,
        "hacking": [],
        "dropped": [],
    }
