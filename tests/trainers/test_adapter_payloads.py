"""The trainer side's payloads (amaris/integrations, amaris.client) against the server's
models. A step's answer is one set of models (amaris.step_answer): the wait route answers
with the class the client returns. The request bodies a caller may pass as JSON are typed
by TypedDicts (a trainer extends ``MetadataBody`` with its own keys); these tests derive
their keys from the request models."""

from __future__ import annotations

import json
from typing import Any, Literal, Required, get_args, get_origin, get_type_hints

from fastapi.routing import APIRoute
from pydantic import BaseModel

from amaris.agents.schemas import AggregatedBehaviour, Strategy
from amaris.client import (
    CanaryAnswer,
    DroppedAnswer,
    HackingAnswer,
    MessageBody,
    MetadataBody,
    RewardClient,
    RolloutBody,
    ScopeAnswer,
    TextPartBody,
    ToolCallBody,
    ToolFunctionBody,
    WaitAnswer,
)
from amaris.client.rewards import ServerAnswer
from amaris.integrations.verl import RewardKwargs, _run
from amaris.models import GetRewardBody, Rollout, TrainingMetadata
from amaris.step_answer import (
    CanarySummary,
    HackingBehaviour,
    OlderScopeOutcome,
    ScopeOutcome,
    StrategyName,
)
from amaris.steps.outcomes import Dropped, WaitResult
from amaris.trajectory import Message, TextPart, ToolCall, ToolFunction
from amaris.trust.rubric_canary.report import CanaryReport
from api.routes.openrlhf import GetRewardRequest, RunMetadata, UnscoredBatchResponse
from api.routes.steps import StepDetail, router
from tests.support.step_runs import full_outcome


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


def _literal(hint: Any) -> set[Any]:
    """The values of the Literal in ``hint`` (through Required, Annotated and | None)."""
    while get_origin(hint) is not Literal:
        hint = next(arg for arg in get_args(hint) if arg is not type(None))
    return set(get_args(hint))


def test_the_wait_route_answers_with_the_class_the_client_returns() -> None:
    [route] = [
        r for r in router.routes if isinstance(r, APIRoute) and r.path == "/rubric_status/wait"
    ]
    assert route.response_model is WaitAnswer
    for method in (RewardClient.rubric_updated, RewardClient.rubric_updated_async):
        assert get_type_hints(method)["return"] is WaitAnswer
    # GET /steps/{step} answers its scopes with the same models.
    scopes = StepDetail.model_fields["scopes"].annotation
    assert scopes == WaitAnswer.model_fields["scopes"].annotation
    # The client's names are the models'.
    assert (CanaryAnswer, HackingAnswer, DroppedAnswer) == (
        CanarySummary,
        HackingBehaviour,
        Dropped,
    )
    assert set(get_args(get_args(ScopeAnswer)[0])) == {ScopeOutcome, OlderScopeOutcome}


def test_the_step_answer_is_what_the_server_models_say() -> None:
    # The canary's report is its summary with the probes; the summarizer's behaviour has the
    # answer's fields, in its order; one vocabulary of strategies.
    assert issubclass(CanaryReport, CanarySummary)
    assert set(CanaryReport.model_fields) - set(CanarySummary.model_fields) == {"probes"}
    assert list(AggregatedBehaviour.model_fields) == list(HackingBehaviour.model_fields)
    assert _literal(Strategy) == _literal(StrategyName)
    canary = CanaryReport.model_fields["outcome"].annotation
    assert _literal(CanarySummary.model_fields["outcome"].annotation) == _literal(canary)


def test_a_full_outcome_reaches_the_client_with_every_key_and_no_other() -> None:
    scope = full_outcome()
    unasked = ScopeOutcome(
        outcome="skipped", version=1, base_version=1, rollouts=0, hacking=[], dropped=[]
    )
    result = WaitResult(
        status="rejected", mode="per_instance", step=7, scopes={"a": scope, "b": unasked}
    )
    # What the route answers (its response model), read by the client's model.
    sent = WaitAnswer.model_validate(result, from_attributes=True).model_dump_json()
    read = WaitAnswer.model_validate_json(sent)
    assert json.loads(read.model_dump_json()) == json.loads(sent)
    assert read.scopes is not None
    a = read.scopes["a"]
    assert isinstance(a, ScopeOutcome)
    assert list(json.loads(sent)["scopes"]["a"]) == list(ScopeOutcome.model_fields)
    assert a.canary is not None and set(a.canary.model_dump()) == set(CanarySummary.model_fields)
    assert a.hacking == [HackingBehaviour(**scope.hacking[0].model_dump())]
    assert a == scope.model_copy(update={"canary": CanarySummary(**a.canary.model_dump())})
    assert json.loads(sent)["scopes"]["b"] == {
        "outcome": "skipped",
        "reason": None,
        "version": 1,
        "base_version": 1,
        "rollouts": 0,
        "hacking": [],
        "dropped": [],
    }
