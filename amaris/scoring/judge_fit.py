"""What the scorer's judge call is shaped by, per rubric: the reply's schema and example, and
the rollout's fields cut to the judge's context window (a trajectory's by its parts,
:mod:`amaris.scoring.trajectory_view`).

Each is built once per rubric (a few hundred rubrics in ``per_instance`` mode, at most) and
looked up on the hot path; the system message stays byte-identical between calls, so a
provider's prefix cache holds.
"""

from __future__ import annotations

import functools
import json
from collections import OrderedDict

from amaris.llm.budget import (
    CHARS_PER_TOKEN,
    MIN_FIELD_CHARS,
    estimate_messages,
    fit_texts,
    json_chars,
)
from amaris.llm.gateway import LLMGateway
from amaris.llm.reply_format import (
    SHOWN_MODES,
    format_instructions,
    shown_example,
    with_instructions,
)
from amaris.llm.schema import SchemaNode
from amaris.rubric.model import RubricVersion
from amaris.scoring.judge_protocol import (
    Reply,
    judge_messages,
    verdicts_example,
    verdicts_schema,
)
from amaris.scoring.trajectory_view import TrajectoryView, fit_fields
from amaris.settings import AgentName

RUBRICS_KEPT = 1024
"""Rubrics whose schema, example and prompt size are kept (least recently used dropped)."""


@functools.lru_cache(maxsize=RUBRICS_KEPT)
def _schema(ids: tuple[str, ...], trajectory: bool) -> SchemaNode:
    return verdicts_schema(ids, trajectory)


@functools.lru_cache(maxsize=RUBRICS_KEPT)
def _example(ids: tuple[str, ...], trajectory: bool) -> Reply:
    return verdicts_example(ids, trajectory)


def rubric_schema(rubric: RubricVersion, trajectory: bool = False) -> SchemaNode:
    """The scorer's reply schema for ``rubric``'s judged criteria (of a ``trajectory``:
    with each verdict's turns)."""
    return _schema(tuple(c.id for c in rubric.judged), trajectory)


def rubric_example(rubric: RubricVersion, trajectory: bool = False) -> Reply:
    """One filled reply for ``rubric``'s judged criteria (shown where no schema is sent)."""
    return _example(tuple(c.id for c in rubric.judged), trajectory)


class ContextFit:
    """A rollout's fields cut (head and tail kept) so the scorer's prompt fits its judge's
    context window, as the gateway has learned or been told it."""

    def __init__(self, gateway: LLMGateway, agent: AgentName, prompt: str) -> None:
        self._gateway = gateway
        self._agent = agent
        self._prompt = prompt
        self._bare_tokens: OrderedDict[tuple[str, int, bool, bool], int] = OrderedDict()
        """Estimated tokens of the scorer's prompt with an empty rollout, per rubric version,
        whether the reply's example is shown and whether the rollout is a trajectory."""

    async def within_budget(
        self, rubric: RubricVersion, fields: dict[str, str], view: TrajectoryView | None = None
    ) -> tuple[dict[str, str], list[str]]:
        """``fields`` cut to the scorer's context budget, and the names of those cut (a
        trajectory's ``view`` cut by its parts)."""
        budget = await self._gateway.prompt_budget(self._agent)
        if budget is None:
            return fields, []
        return self.fit(rubric, fields, budget, view)

    def fit(
        self,
        rubric: RubricVersion,
        fields: dict[str, str],
        budget: int,
        view: TrajectoryView | None = None,
    ) -> tuple[dict[str, str], list[str]]:
        """Cut the rollout's fields so the scorer's prompt fits ``budget`` tokens
        (estimated); returns the fields and the names of those cut. A trajectory's output
        is cut by its parts (:meth:`TrajectoryView.text`), its turns' list counted."""
        bare = self._bare(rubric, tuple(fields), view is not None)
        room = int((budget - bare) * CHARS_PER_TOKEN)
        if view is not None:
            room -= len(json.dumps(view.turns)) - len("[]")  # the bare prompt's turns: []
        if room < MIN_FIELD_CHARS:
            # The instructions and rubric alone nearly fill the window: cutting the rollout
            # to nothing would judge something else. The endpoint decides (an overflow is
            # judge_context_overflow).
            return fields, []
        if sum(len(v) for v in fields.values()) * 6 <= room:
            return fields, []  # fits even if JSON wrote every character as "\u001f"
        if view is not None:
            return fit_fields(view, fields, room, json_chars)
        return fit_texts(fields, room, json_chars)

    def _bare(self, rubric: RubricVersion, names: tuple[str, ...], trajectory: bool) -> int:
        # Built once per rubric version and mode, not per request: the hot path only looks
        # it up. In the modes that send no schema the gateway ends the system message with
        # the reply's example (amaris/llm/reply_format.py): counted here too.
        shown = self._gateway.output_mode(self._agent).mode in SHOWN_MODES
        key = (rubric.scope, rubric.version, shown, trajectory)
        bare = self._bare_tokens.get(key)
        if bare is None:
            # A trajectory's prompt: its template's trajectory sections, an empty turns list.
            turns: list[int] | None = [] if trajectory else None
            empty = {name: "" for name in names}
            messages = judge_messages(self._prompt, rubric, empty, turns)
            if shown:
                example = format_instructions(shown_example(rubric_example(rubric, trajectory)))
                messages = with_instructions(messages, example)
            bare = self._bare_tokens[key] = estimate_messages(messages)
            while len(self._bare_tokens) > RUBRICS_KEPT:
                self._bare_tokens.popitem(last=False)
        return bare
