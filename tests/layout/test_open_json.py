"""JSON left open in production code: ``dict[str, Any]`` and every alias of it.

The count (tests/support/open_json.py) takes each ``dict[str, Any]``, ``Mapping[str, Any]``
or ``dict[str, object]`` as written and each use of an alias of one (``JSONDict``,
``DataBlock``...): renaming the type does not close it. The budget below is a ratchet at
the current count, per part, so a new open shape fails here and must be given a model or a
TypedDict, or the budget raised with a reason; docs/architecture.md ("Open JSON") has the
target and what remains.
"""

from __future__ import annotations

from api.routes.openrlhf import RunMetadata, _Metadata
from tests.support.open_json import open_json_aliases, open_json_uses, per_part

BUDGET = {
    # the trainer's metadata, the settings dump, a run's extra, a rollout's metadata, a
    # trajectory's outcome (the environment's own signals), the wire forms a rollout and a
    # message dump to (a model's dump with keys dropped)
    "amaris": 19,
    "amaris/agents": 5,  # the trainer's metadata (twice); the blocks parsed back; a JSON schema
    "amaris/app": 0,
    "amaris/bootstrap": 1,  # a data file's candidate metadata
    "amaris/cli": 0,
    "amaris/client": 2,  # a rollout's metadata and a trajectory's outcome in a trainer's body
    # a tool call's arguments; a body narrowed key by key; a trainer's chat messages as it
    # holds them; the trainers' and ecosystems' own signatures (OpenRLHF's agent state and
    # results, verl's loop messages and multimodal info, NeMo Gym's and OpenRLHF's outcome)
    "amaris/integrations": 23,
    "amaris/llm": 4,  # a reply before validation; a configured response_format; pydantic's schema
    "amaris/memory": 6,  # the trainer's metadata, records and analyses of any version
    "amaris/offline": 0,
    "amaris/scoring": 0,
    "amaris/settings": 2,  # raw YAML before validation; the provider's JSON (ProviderJSON)
    "amaris/sim": 2,  # a recorded rollout's trainer metadata; what a command adds to metrics
    "api": 3,
    "tasks": 1,  # Prefect's cache-key parameters
}
"""Open JSON uses per part at most; a part not named has none (``flows`` among them)."""

UNEXPLAINED_ALLOWED: tuple[str, ...] = ()
"""Parts whose uses may still lack their reason: other work in progress rewrites them."""


def test_the_flows_leave_no_json_open() -> None:
    # The step flow passes models: a scope's trainer metadata is its latest record's field,
    # the outcome per scope a ScopeOutcome (StepRun's).
    assert [use for use in open_json_uses() if use.part == "flows"] == []


def test_each_part_stays_within_its_budget() -> None:
    counts = per_part(open_json_uses())
    over = {part: n for part, n in counts.items() if n > BUDGET.get(part, 0)}
    assert over == {}, f"new open JSON (uses per part over BUDGET): {over}"
    assert sum(counts.values()) <= sum(BUDGET.values())


def test_each_use_says_why_its_shape_is_open() -> None:
    silent = [
        f"{use.path}:{use.line}: {use.text}"
        for use in open_json_uses()
        if not use.explained and use.part not in UNEXPLAINED_ALLOWED
    ]
    assert silent == [], "a comment on (or above) the line, or on the alias, says why"


def test_aliases_are_followed_through_imports_and_models_are_not_aliases() -> None:
    aliases = open_json_aliases()
    # An alias of an alias, and a pydantic-checked Annotated one, are found...
    assert {"amaris.jsonfile.JSONDict", "amaris.manifest.ConfigJSON"} <= set(aliases)
    assert "amaris.text_fields.JSONObject" in aliases
    # ...and a model that shares an alias's name elsewhere is not one.
    assert "amaris.memory.records.RolloutRecord" not in aliases
    uses = open_json_uses()
    assert not [
        u for u in uses if u.path == "amaris/memory/records.py" and u.text == "RolloutRecord"
    ]
    # An imported alias counts where it is used: the agents' blocks hold the trainer's
    # metadata as one (TrainerMetadata's root, amaris.jsonfile's JSONDict).
    assert any(u.path == "amaris/agents/blocks.py" and u.text == "JSONDict" for u in uses)


def test_the_get_reward_item_metadata_mirrors_run_metadata() -> None:
    # /get_reward builds each item's metadata field by field (a TypedDict, not a dict of
    # RunMetadata's dump): a field added to RunMetadata must be added there too.
    assert set(_Metadata.__annotations__) == {*RunMetadata.model_fields, "current_step"}
