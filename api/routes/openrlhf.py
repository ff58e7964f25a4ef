"""``POST /get_reward``: OpenRLHF's remote reward model protocol (``--remote_rm_url``).

OpenRLHF posts ``{"query": [...], "prompts": [...], "labels": [...]}`` where ``query[i]``
is ``prompts[i]`` followed by the response, as its tokenizer decodes them (the split:
:mod:`amaris.text.prompt_split`), and reads ``rewards`` (advantages), ``scores``
(dynamic filtering) and ``extra_logs`` (per-sample values it logs); ``reward_vectors``, each
sample's reward per objective, is amaris's, beside them. The items are checked
and scored as ``/batch_score`` items (:class:`amaris.scoring.batch.BatchScoring`): same
rollout log, step counting, cache and concurrency limit. Every sample is checked before any
is scored: one bad sample refuses the batch (422) with nothing judged or logged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Annotated, Required, TypedDict

from fastapi import APIRouter, Header, Query
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from amaris.client import STEP_HEADER
from amaris.models import (
    ErrorDetail,
    JSONValue,
    RewardVector,
    ScoreRequest,
    ScoreResponse,
    Text,
)
from amaris.scoring.batch import BatchScoring, InvalidItem, Path
from amaris.steps.coordinator import StepCoordinator, StepRefusedError
from amaris.text.prompt_split import MIN_PROMPT_TAIL, response_of
from api.deps import ServicesDep, batch_scoring
from api.errors import INPUT_ERRORS, STEP_ERRORS, error_response, step_refused

router = APIRouter(tags=["trainers"])
log = logging.getLogger("amaris.api")


class RunMetadata(BaseModel):
    """What amaris knows of the run (the step comes from the header or query)."""

    model_config = ConfigDict(extra="forbid")

    high_level_goal: Text | None = None
    model_size: Text | None = None
    total_steps: int | None = Field(default=None, ge=0)
    other_context: Text | None = None


class GetRewardRequest(BaseModel):
    """OpenRLHF's body, plus optional amaris fields its trainer never sends."""

    # OpenRLHF versions and forks add fields of their own (metadata, datasources, token
    # ids...): they are ignored rather than refused, so any of them can post here.
    model_config = ConfigDict(extra="ignore")

    query: list[Text] = Field(min_length=1, description="Prompt + response, per sample.")
    prompts: list[Text] = Field(description="The prompt each query starts with.")
    labels: list[JSONValue] | None = Field(
        default=None, description="Reference answers (supplemental_context); null: none."
    )
    group_ids: list[Text] | None = Field(
        default=None,
        description=(
            "amaris: the group (prompt id) of each sample, at most 512 characters; default: "
            "none, the samples of one prompt are one group."
        ),
    )
    amaris_metadata: RunMetadata | None = Field(
        default=None, description="amaris: the run's goal, model size, total steps."
    )


class GetRewardResponse(BaseModel):
    """What OpenRLHF reads, plus the step the rollouts were logged under."""

    rewards: list[float | None]
    scores: list[float | None]
    extra_logs: dict[str, list[float]] = Field(
        description="Per sample: amaris_rubric_version, amaris_unscored (1/0), amaris_cached."
    )
    step: int
    statuses: list[str]
    reward_vectors: list[RewardVector | None] = Field(
        description="amaris: per sample, its reward per objective (/score's `rewards`: criterion "
        "ids, 'anchors', 'adaptive'); null for an unscored sample. Beside `rewards`, which "
        "OpenRLHF reads as the scalar rewards."
    )


class UnscoredBatchResponse(GetRewardResponse):
    """The 503 body: which samples have no reward (null), and why."""

    error: str = "unscored"
    detail: list[ErrorDetail]


def current_step(coordinator: StepCoordinator, max_step: int) -> int:
    """The step a request without one belongs to: the open step, else the next one.

    Trainers that do not say which step they are at rely on amaris completing steps by
    itself (``pipeline.rollouts_per_step``): once a step starts completing, new rollouts
    go to the step after it. Steps over ``max_step`` (``pipeline.max_step``; only a store
    written before that bound can hold them) are left out.
    """
    steps = {step: status for step, status in coordinator.snapshot().items() if step <= max_step}
    opened = [step for step, status in steps.items() if status == "open"]
    if opened:
        return max(opened)
    return max(steps) + 1 if steps else 0


def _label(value: JSONValue) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _size_errors(body: GetRewardRequest, limit: int, reject: bool) -> list[ErrorDetail]:
    """Prompts and queries over the size limit, found before anything else reads them.

    A prompt becomes ``rollout.input`` and the rest of its query ``rollout.output``: with
    ``scoring.oversize: reject`` a prompt may have ``limit`` characters and a query twice
    that. (With ``truncate`` they are cut after the search, which the body's own size
    limit bounds.)
    """
    if not reject:
        return []
    errors = [
        ErrorDetail(field=f"prompts[{i}]", message=f"has {len(p)} characters; the limit is {limit}")
        for i, p in enumerate(body.prompts)
        if len(p) > limit
    ]
    errors += [
        ErrorDetail(
            field=f"query[{i}]",
            message=f"has {len(q)} characters; the limit is {2 * limit} (prompt and response)",
        )
        for i, q in enumerate(body.query)
        if len(q) > 2 * limit
    ]
    return errors


def _length_errors(body: GetRewardRequest) -> list[ErrorDetail]:
    expected = len(body.query)
    lists = {"prompts": body.prompts, "labels": body.labels, "group_ids": body.group_ids}
    return [
        ErrorDetail(field=name, message=f"has {len(values)} items; query has {expected}")
        for name, values in lists.items()
        if values is not None and len(values) != expected
    ]


class _Rollout(TypedDict):
    id: str
    input: str
    output: str
    supplemental_context: str | None
    group_id: str | None


class _Metadata(TypedDict, total=False):
    """An item's metadata: :class:`RunMetadata`'s fields (when the body has them) and the
    step."""

    high_level_goal: str | None
    model_size: str | None
    total_steps: int | None
    other_context: str | None
    current_step: Required[int]


class _Item(TypedDict):
    """A sample as the JSON of a /batch_score item (validated as one)."""

    rollout: _Rollout
    metadata: _Metadata


def _items(body: GetRewardRequest, step: int) -> list[_Item | ErrorDetail]:
    """Each sample as a /batch_score item, or what is wrong with it."""
    run = body.amaris_metadata
    metadata: _Metadata = (
        {"current_step": step}
        if run is None
        else {
            "high_level_goal": run.high_level_goal,
            "model_size": run.model_size,
            "total_steps": run.total_steps,
            "other_context": run.other_context,
            "current_step": step,
        }
    )
    items: list[_Item | ErrorDetail] = []
    for i, (query, prompt) in enumerate(zip(body.query, body.prompts, strict=True)):
        response = response_of(query, prompt)
        if response is None:
            items.append(
                ErrorDetail(
                    field=f"query[{i}]",
                    message=(
                        f"does not contain prompts[{i}]: a query is the prompt (or, when the "
                        f"trainer cut a long prompt, its last {MIN_PROMPT_TAIL}+ characters) "
                        "followed by the response"
                    ),
                )
            )
            continue
        rollout: _Rollout = {
            "id": f"get_reward-{uuid.uuid4().hex[:16]}",
            # The whole prompt, also when the trainer's policy saw only its tail.
            "input": prompt,
            "output": response,
            "supplemental_context": _label(body.labels[i]) if body.labels else None,
            # No group id by default: the rollout's group is then its input, the prompt (the
            # rule of /score, the step pipeline and the canary), whatever its length; the
            # prompt itself would exceed rollout.group_id's 512 characters.
            "group_id": body.group_ids[i] if body.group_ids else None,
        }
        items.append({"rollout": rollout, "metadata": metadata})
    return items


_SOURCES: dict[Path, str] = {
    ("rollout", "input"): "prompts",
    ("rollout", "supplemental_context"): "labels",
    ("rollout", "group_id"): "group_ids",
}
"""The /get_reward list each rollout field of an item is made from (else ``query``)."""


def _error(item: InvalidItem) -> ErrorDetail:
    """An invalid item as the error of the /get_reward field its problem came from, with
    the item's /batch_score reason as the message."""
    path = item.path
    source = _SOURCES.get(path[:2])
    if source is not None:
        field = f"{source}[{item.index}]"
    elif path[:1] == ("metadata",):
        field = "amaris_metadata"
    else:
        field = f"query[{item.index}]"
    return ErrorDetail(field=field, message=item.reason())


def _checked(
    items: list[_Item | ErrorDetail], batch: BatchScoring
) -> tuple[list[ScoreRequest], list[ErrorDetail]]:
    """Every sample checked as a /batch_score item: the requests, or every problem."""
    requests: list[ScoreRequest] = []
    errors: list[ErrorDetail] = []
    for i, item in enumerate(items):
        if isinstance(item, ErrorDetail):
            errors.append(item)
            continue
        checked = batch.check(i, item, False)
        if isinstance(checked, ScoreRequest):
            requests.append(checked)
            continue
        error = _error(checked)
        # The run metadata is the same for every sample: one error for it is enough.
        if error.field != "amaris_metadata" or all(e.field != error.field for e in errors):
            errors.append(error)
    return requests, errors


def _answer(results: list[ScoreResponse], step: int) -> GetRewardResponse:
    rewards = [r.score for r in results]
    unscored = [1.0 if r.status != "scored" else 0.0 for r in results]
    return GetRewardResponse(
        rewards=rewards,
        scores=list(rewards),
        step=step,
        statuses=[r.status for r in results],
        reward_vectors=[r.rewards for r in results],
        extra_logs={
            "amaris_rubric_version": [float(r.rubric_version or 0) for r in results],
            "amaris_unscored": unscored,
            "amaris_cached": [1.0 if r.cached else 0.0 for r in results],
        },
    )


@router.post(
    "/get_reward",
    response_model=GetRewardResponse,
    responses={
        **INPUT_ERRORS,
        **STEP_ERRORS,
        503: {
            "model": UnscoredBatchResponse,
            "description": "Some samples are unscored and `scoring.on_failure` is not `neutral`.",
        },
    },
)
async def get_reward(
    body: GetRewardRequest,
    services: ServicesDep,
    step_header: Annotated[int | None, Header(alias=STEP_HEADER, ge=0)] = None,
    step_query: Annotated[int | None, Query(alias="step", ge=0)] = None,
) -> GetRewardResponse | JSONResponse:
    """Score OpenRLHF's batch; one reward per query, in order.

    The step is the ``X-Amaris-Step`` header, else the ``step`` query parameter, else the
    step amaris has open (see :func:`current_step`); a refused step (``pipeline.max_step``,
    ``max_steps_ahead``, ``max_open_steps``) answers 422 or 409 naming the header or the
    query parameter, before anything is judged. OpenRLHF needs a number for every
    sample: when one is unscored, the whole batch answers 503 with ``Retry-After``
    (OpenRLHF retries it), unless ``scoring.on_failure`` is ``neutral``, whose
    ``neutral_score`` is then the reward, flagged in ``extra_logs.amaris_unscored``.
    """
    scoring = services.settings.scoring
    errors = _length_errors(body) or _size_errors(
        body, scoring.max_field_chars, scoring.oversize == "reject"
    )
    if errors:
        return error_response(422, "invalid_request", errors)
    step = step_header if step_header is not None else step_query
    if step is None:
        step = current_step(services.coordinator, services.settings.pipeline.max_step)
    try:
        await services.coordinator.check(step)
    except StepRefusedError as exc:
        field = "step" if step_header is None and step_query is not None else STEP_HEADER
        refused = step_refused(exc, field)
        log.warning("%s POST /get_reward: %s: %s", refused.status_code, field, exc)
        return refused
    batch = batch_scoring(services)
    batch.admit("query", len(body.query))
    # Off the event loop: finding each prompt in its query reads every character.
    requests, errors = _checked(await asyncio.to_thread(_items, body, step), batch)
    if not errors:
        # Each sample against its own rubric too: a 422 here has scored and logged nothing.
        errors = [_error(item) for item in await batch.check_scopes(requests)]
    if errors:
        return error_response(422, "invalid_request", errors)
    scored = await batch.score(requests)
    invalid = [_error(r) for r in scored if isinstance(r, InvalidItem)]
    if invalid:
        return error_response(422, "invalid_request", invalid)
    results = [r for r in scored if isinstance(r, ScoreResponse)]
    answer = _answer(results, step)
    policy = services.settings.scoring
    missing = [
        ErrorDetail(field=f"query[{i}]", message=r.reason or "unscored")
        for i, r in enumerate(results)
        if r.score is None
    ]
    if missing and policy.on_failure != "neutral":
        unscored = UnscoredBatchResponse(**answer.model_dump(), detail=missing)
        return JSONResponse(
            jsonable_encoder(unscored),
            status_code=503,
            headers={"Retry-After": str(policy.retry_after_seconds)},
        )
    return answer
