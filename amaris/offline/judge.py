"""The offline judge: answers amaris agent prompts with deterministic rules, no LLM.

It reads the agent's data blocks (see :mod:`amaris.agents.prompts`: the context block of the system
message and the data block of the user message, merged), dispatches on their ``agent`` field
and returns the JSON of the agent's own model (:mod:`amaris.agents.schemas`), dumped here
once. The scorer's rules are :mod:`amaris.offline.heuristics`'; of a trajectory (a rollout
that lists its ``turns``), :mod:`amaris.offline.trajectories`' (its claims checked against
its outcome, each verdict with its turns).
"""

from __future__ import annotations

import json
from typing import cast

from pydantic import BaseModel, ValidationError

from amaris.agents.payloads import (
    AnalyzerData,
    BootstrapData,
    GroupScorerAnswer,
    GroupScorerData,
    MetaSummarizerData,
    QueryGeneratorData,
    ScorerAnswer,
    ScorerData,
    SummarizerData,
    UpdaterData,
)
from amaris.agents.prompts import read_data
from amaris.offline.agents import (
    handle_analyzer,
    handle_meta_summarizer,
    handle_query_generator,
    handle_summarizer,
    handle_updater,
)
from amaris.offline.bootstrap import handle_bootstrap
from amaris.offline.group import judge_group
from amaris.offline.heuristics import judge_criteria
from amaris.offline.trajectories import judge_trajectory


class OfflineJudgeError(ValueError):
    """The messages carry no data block the offline judge understands."""


def _score(data: ScorerData) -> ScorerAnswer:
    criteria = [(str(c["id"]), str(c["text"])) for c in data["criteria"]]
    rollout = data["rollout"]
    if "turns" in rollout:
        return {"verdicts": judge_trajectory(criteria, rollout)}
    verdicts = judge_criteria(
        criteria,
        input=str(rollout.get("input") or ""),
        output=str(rollout.get("output") or ""),
        reference=rollout.get("supplemental_context") or None,
    )
    return {"verdicts": [{"id": v.id, "reason": v.reason, "score": v.score} for v in verdicts]}


def respond(messages: list[dict[str, str]]) -> str:
    """The JSON reply to a chat request made of amaris agent messages: the agent's answer
    to its merged blocks.

    The blocks are JSON their caller wrote in the agent's shape
    (:mod:`amaris.agents.payloads`), cast to it: a block that lacks a key or has a value of
    another type fails in the handler (a malformed block).

    Raises:
        OfflineJudgeError: no data block, or an agent this judge does not know.
    """
    try:
        data = read_data(messages)
    except ValueError as exc:
        raise OfflineJudgeError(f"no amaris data in the messages: {exc}") from exc
    answer: BaseModel | ScorerAnswer | GroupScorerAnswer
    try:
        match str(data.get("agent")):
            case "scorer":
                answer = _score(cast(ScorerData, data))
            case "scorer_group":
                answer = judge_group(cast(GroupScorerData, data))
            case "analyzer":
                answer = handle_analyzer(cast(AnalyzerData, data))
            case "summarizer":
                answer = handle_summarizer(cast(SummarizerData, data))
            case "meta_summarizer":
                answer = handle_meta_summarizer(cast(MetaSummarizerData, data))
            case "query_generator":
                answer = handle_query_generator(cast(QueryGeneratorData, data))
            case "updater":
                answer = handle_updater(cast(UpdaterData, data))
            case "bootstrap":
                answer = handle_bootstrap(cast(BootstrapData, data))
            case _:
                raise OfflineJudgeError(
                    f"offline judge has no rules for agent {data.get('agent')!r}"
                )
    except (KeyError, TypeError, ValidationError) as exc:
        raise OfflineJudgeError(f"malformed data block: {exc!r}") from exc
    dumped = answer.model_dump(mode="json") if isinstance(answer, BaseModel) else answer
    return json.dumps(dumped, ensure_ascii=False)
