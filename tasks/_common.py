"""Helpers shared by the pipeline tasks (not tasks themselves)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Generic, Literal, ParamSpec, TypeVar, cast

from prefect import Task, task
from prefect.context import TaskRunContext
from prefect.utilities.annotations import quote
from pydantic import BaseModel

from amaris.agents.blocks import SummaryInput, TaskContext, TaskData
from amaris.agents.findings import StepFindings
from amaris.agents.payloads import CriteriaContext
from amaris.agents.prompts import agent_messages, agent_template
from amaris.agents.schemas import RubricUpdateProposal
from amaris.llm.budget import estimate_messages, estimate_tokens, split_by_budget
from amaris.llm.gateway import LLMContextOverflowError, LLMOutputError
from amaris.llm.schema import SchemaNode, strict_schema
from amaris.rubric.guardrails import AppliedUpdate, apply_modifications
from amaris.rubric.informativeness import DueCriterion, retirements
from amaris.rubric.model import RubricVersion
from amaris.rubric.support import check_support
from amaris.scoring.scorer import Scorer
from amaris.settings import AgentName
from amaris.steps.context import get_context
from amaris.steps.retry import digest, retry_on_transient
from tasks.models import AgentCriterion

T = TypeVar("T", bound=BaseModel)
M = TypeVar("M", bound=BaseModel)
Item = TypeVar("Item")
P = ParamSpec("P")
R = TypeVar("R")
T_co = TypeVar("T_co", covariant=True)
Policy = tuple[int, tuple[float, ...]]
"""A retry policy: how many retries, after which delays."""

DROPS = (LLMOutputError, LLMContextOverflowError)
"""A pipeline agent's permanent failures: its output is dropped (a
:class:`~amaris.steps.outcomes.Dropped`), the step goes on with the evidence it has.
``LLMOutputError`` includes ``LLMTruncatedError``."""


def apply_proposal(
    current: RubricVersion,
    proposal: RubricUpdateProposal,
    due: Sequence[DueCriterion],
    findings: StepFindings | None = None,
) -> tuple[RubricUpdateProposal, list[str], AppliedUpdate]:
    """``proposal`` with the retirements of the ``due`` criteria it leaves alone, their
    ids, and the adaptive set the guardrails make of it (the memory embedder judging
    near-duplicates and changes of meaning). With the step's ``findings``, an add or edit
    whose only support is text addressed to the grader or the pipeline is refused first
    (:func:`~amaris.rubric.support.check_support`). Blocking (embeddings): run it in a
    thread.

    Raises:
        UpdateRejected: the guardrails refuse it.
    """
    ctx = get_context()
    if findings is not None:
        check_support(current, proposal.rubric_modifications, findings)
    extra = retirements(current, proposal.rubric_modifications, due, ctx.bounds.max_modifications)
    if extra:
        proposal = proposal.model_copy(
            update={"rubric_modifications": [*proposal.rubric_modifications, *extra]}
        )
    applied = apply_modifications(
        current, proposal.rubric_modifications, ctx.bounds, ctx.memory.embed
    )
    return proposal, [str(m.criterion_id) for m in extra], applied


def training_scorer(account: str) -> Scorer:
    """The training judge as the step's canaries put probes to it: the scorer agent's
    prompt, samples and logprobs, under the rubrics in force, its calls counted under the
    ledger agent ``account`` (not the scorer's, which counts the served rewards)."""
    ctx = get_context()
    judge = ctx.settings.agent_options("scorer")
    return Scorer(
        ctx.settings.scoring,
        ctx.gateway,
        ctx.rubrics,
        ctx.prompts["scorer"],
        samples=judge.samples,
        logprobs=judge.logprobs,
        account=account,
    )


def criteria_context(criteria: Sequence[AgentCriterion]) -> CriteriaContext:
    """The context block of the summarizers and the query generator: the rubric in force,
    each criterion as the agents' blocks carry it."""
    return {"criteria": [c.data() for c in criteria]}


def dumped(items: Sequence[M]) -> list[M]:
    """``items`` as an agent's block carries them: a list of the models, each written as
    its JSON (``model_dump(mode="json")``) with the block
    (:func:`amaris.agents.prompts.data_message`)."""
    return list(items)


RESULT_FORMAT = 5
"""In every LLM task's cache key: raised when what a task returns changes shape or the
module its classes are unpickled from, so a result cached by older code is not read."""


# Prefect's signature: a run's parameters by name, of any task, read only to be hashed.
CacheKeyFn = Callable[[TaskRunContext, Mapping[str, object]], str]
"""A task's ``cache_key_fn``: its run's context and parameters (by name) to a key."""


def cache_key(agent: AgentName) -> CacheKeyFn:
    """A task cache key: the data folder, every parameter, and the agent's prompt and model
    fingerprint, so a re-run reuses a result only when nothing it depends on changed."""
    return work_key(agent, [agent])


def unwalked(value: Item) -> Item:
    """``value`` as a task parameter Prefect passes on without walking it (``quote``):
    Prefect would visit every record and analysis looking for futures; a cache key
    still sees it."""
    return cast(Item, quote(value))


def work_key(name: str, agents: Sequence[AgentName]) -> CacheKeyFn:
    """A cache key of a task asking several agents: the data folder, every parameter, and
    each agent's prompt and model fingerprint."""

    return lambda context, params: (
        f"{name}-"
        + digest(
            get_context().namespace,
            params,
            [get_context().prompt_fingerprint(agent) for agent in agents],
            RESULT_FORMAT,
        )
    )


class LLMTask(Generic[P, T_co]):
    """One of an agent's tasks as :func:`llm_task` declares it: named, its result
    persisted and reused under :func:`cache_key`, its transient failures retried
    (:func:`~amaris.steps.retry.retry_on_transient`) ``pipeline.task_retries`` times after
    ``pipeline.task_retry_delays_seconds`` (the last repeats), jittered by 20%.

    The retry policy is configuration, which does not exist yet when the task modules are
    imported: :attr:`task` is the declared task with it (``Task.with_options``), built the
    first time the task runs under a policy and reused for every later call under it.
    Callers call the LLM task as they would the task."""

    def __init__(self, declared: Task[P, Coroutine[object, object, T_co]]) -> None:
        self.declared = declared
        self._by_policy: dict[Policy, Task[P, Coroutine[object, object, T_co]]] = {}

    @property
    def task(self) -> Task[P, Coroutine[object, object, T_co]]:
        """The declared task with the retries of the pipeline in force."""
        pipeline = get_context().settings.pipeline
        policy = (pipeline.task_retries, tuple(pipeline.task_retry_delays_seconds))
        configured = self._by_policy.get(policy)
        if configured is None:
            configured = self._by_policy[policy] = self.declared.with_options(
                retries=policy[0], retry_delay_seconds=list(policy[1]), retry_jitter_factor=0.2
            )
        return configured

    async def __call__(self, *args: P.args, **kwargs: P.kwargs) -> T_co:
        return await self.task(*args, **kwargs)

    @property
    def fn(self) -> Callable[P, Coroutine[object, object, T_co]]:
        """The function itself: a call inside another task's run, with no run of its own."""
        return self.declared.fn


def llm_task(
    agent: AgentName, name: str, run_name: str
) -> Callable[[Callable[P, Coroutine[object, object, R]]], LLMTask[P, R]]:
    """Declares the task of one of ``agent``'s calls (an ``async`` function), named
    ``name`` (its runs ``run_name``), as an :class:`LLMTask`."""

    def declare(fn: Callable[P, Coroutine[object, object, R]]) -> LLMTask[P, R]:
        declared = task(
            name=name,
            cache_key_fn=cache_key(agent),
            persist_result=True,
            retry_condition_fn=retry_on_transient,
            task_run_name=run_name,
        )
        return LLMTask(declared(fn))

    return declare


async def ask(
    agent: str,
    context: TaskContext,
    data: TaskData,
    schema: type[T],
    step: int,
    json_schema: SchemaNode | None = None,
    trajectory: bool = False,
) -> T:
    """One structured call of ``agent``: its template and ``context`` (amaris's state that
    many calls share: the rubric, bounds) first, the per-call ``data`` last, so a provider's
    prefix cache serves the shared part (:func:`amaris.agents.prompts.agent_messages`).
    ``json_schema`` replaces ``schema``'s strict JSON schema in the request; ``trajectory``:
    the call reads an agent's trajectory, so its template's trajectory sections are sent
    (:func:`amaris.agents.prompts.agent_template`)."""
    ctx = get_context()
    return await ctx.gateway.structured(
        agent,
        agent_messages(agent, agent_template(agent, ctx.prompts[agent], trajectory), context, data),
        schema,
        step=step,
        json_schema=json_schema,
    )


def at_most_items(schema: type[BaseModel], field: str, limit: int) -> SchemaNode:
    """``schema``'s strict JSON schema with its list ``field`` held to ``limit`` items: a
    per-call bound (the queries or modifications the configuration allows), so that a
    constrained decoder writes no more than the caller keeps."""
    tightened = copy.deepcopy(strict_schema(schema))
    node = tightened["properties"][field]
    node["maxItems"] = min(limit, node.get("maxItems", limit))
    return tightened


def prompt_tokens(
    agent: str, context: TaskContext, data: TaskData, trajectory: bool = False
) -> int:
    """Estimated prompt tokens of :func:`ask`'s request for ``agent`` with ``context``,
    ``data`` and ``trajectory``."""
    template = agent_template(agent, get_context().prompts[agent], trajectory)
    return estimate_messages(agent_messages(agent, template, context, data))


def item_tokens(item: object) -> int:
    """Estimated tokens an item (JSON, or a model as its JSON) adds to a data message's
    JSON list."""
    if isinstance(item, BaseModel):
        item = item.model_dump(mode="json")
    return estimate_tokens(json.dumps(item, ensure_ascii=False)) + 1


async def split_for(
    agent: str,
    context: CriteriaContext,
    data: SummaryInput,
    field: Literal["analyses", "summaries"],
    items: Sequence[Item],
    max_count: int | None = None,
) -> list[list[Item]]:
    """``items`` in consecutive parts, each small enough that :func:`ask`'s request with
    ``context`` and ``data`` holding the part as its ``field`` fits ``agent``'s context
    budget, and of at most ``max_count`` items.

    With the agent's context window unknown, only ``max_count`` bounds a part.
    """
    budget = await get_context().gateway.prompt_budget(agent)
    if budget is None:
        return split_by_budget(items, item_tokens, None, max_count)
    emptied = data.copy()
    emptied[field] = []
    room = budget - prompt_tokens(agent, context, emptied)
    return split_by_budget(items, item_tokens, room, max_count)
