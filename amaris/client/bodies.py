"""What the client sends: the request models of :mod:`amaris.models` as JSON, and the JSON a
caller may pass instead (typed here, field for field the models')."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Required, TypedDict

from pydantic import BaseModel

from amaris.jsonfile import JSONDict
from amaris.models import Rollout, ScoreRequest, TrainingMetadata
from amaris.trajectory import FinishReason, Role

STEP_HEADER = "X-Amaris-Step"
"""A trainer's step on ``POST /get_reward`` (read in :mod:`api.routes.openrlhf`)."""


class ToolFunctionBody(TypedDict, total=False):
    """The function a tool call invokes (:class:`amaris.trajectory.ToolFunction`)."""

    name: Required[str]
    arguments: Required[str]  # as the policy wrote them: a string, not parsed JSON


class ToolCallBody(TypedDict, total=False):
    """One tool call of an assistant message (:class:`amaris.trajectory.ToolCall`)."""

    id: Required[str]
    type: Literal["function"]
    function: Required[ToolFunctionBody]


class TextPartBody(TypedDict, total=False):
    """One text part of a message's content (:class:`amaris.trajectory.TextPart`)."""

    type: Required[Literal["text"]]
    text: Required[str]


class MessageBody(TypedDict, total=False):
    """One OpenAI chat message of a trajectory (:class:`amaris.trajectory.Message`):
    ``tool_calls`` on an assistant message only, ``tool_call_id`` on a tool message only."""

    role: Required[Role]
    content: str | list[TextPartBody] | None
    name: str | None
    tool_calls: list[ToolCallBody] | None
    tool_call_id: str | None


class RolloutBody(TypedDict, total=False):
    """A rollout's JSON: the fields of :class:`amaris.models.Rollout`, which the client takes
    too and the server checks it with (a 422 names the field).

    Either ``input`` and ``output`` (a prompt and a response), or ``messages`` (an agent's
    trajectory) with an optional ``outcome`` and ``finish_reason``: never both forms.
    """

    id: Required[str]
    input: str
    output: str
    messages: list[MessageBody] | None
    # The environment's verifiable signals: the trainer's JSON object.
    outcome: JSONDict | None
    finish_reason: FinishReason | None
    supplemental_context: str | None
    # Free-form metadata stored with the rollout: the trainer's JSON, open on the server too.
    metadata: JSONDict | None
    group_id: str | None


class MetadataBody(TypedDict, total=False):
    """Where the trainer is, as JSON: the fields of :class:`amaris.models.TrainingMetadata`
    (taken too), and a trainer's own keys in a ``TypedDict`` that extends this one."""

    high_level_goal: str | None
    model_size: str | None
    current_step: int
    total_steps: int | None
    other_context: str | None


class ScoreItem(TypedDict):
    """One rollout to score and where the trainer is (an item of ``/batch_score``)."""

    rollout: Rollout | RolloutBody
    metadata: TrainingMetadata | MetadataBody


class ScoreBody(ScoreItem):
    """A ``/score`` body."""

    include_breakdown: bool


class BatchBody(TypedDict):
    """A ``/batch_score`` body."""

    items: Sequence[ScoreItem]
    include_breakdown: bool


class StepBody(TypedDict, total=False):
    """A ``/complete`` body: the step, or none for the server's current one."""

    step: int


_JSON = (Mapping, list, tuple, str, int, float, type(None))  # what JSON encodes (bool: an int)


# value: what a caller passed as a request or its part (named by field), checked here.
def request_json(value: Any, field: str, model: type[BaseModel]) -> Any:
    """``value`` as a request's JSON: a ``model`` (a subclass too) with the fields it was
    given only, so that the server rebuilds the same model (an unset
    ``TrainingMetadata.current_step`` is the step open now, not step 0); JSON as is (the
    server names what is wrong in it).

    Raises:
        TypeError: ``value`` is another model, or no JSON; the message names ``field``.
    """
    if isinstance(value, model):
        return value.model_dump(mode="json", exclude_unset=True)
    if isinstance(value, BaseModel) or not isinstance(value, _JSON):
        raise TypeError(
            f"{field} must be an amaris.models.{model.__name__} or its JSON (a dict), "
            f"got {type(value).__name__}"
        )
    return dict(value) if isinstance(value, Mapping) else value


def score_item(item: ScoreItem | ScoreRequest, field: str) -> ScoreItem:
    """A ``/batch_score`` item as the server reads it (:func:`request_json`)."""
    if not isinstance(item, Mapping):
        dumped: ScoreItem = request_json(item, field, ScoreRequest)
        return dumped
    sent = ScoreItem(**item)
    if "rollout" in item:
        sent["rollout"] = request_json(item["rollout"], f"{field}.rollout", Rollout)
    if "metadata" in item:
        sent["metadata"] = request_json(item["metadata"], f"{field}.metadata", TrainingMetadata)
    return sent
