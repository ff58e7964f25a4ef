"""The guardrails between an updater's proposal and a new rubric version.

An updater (an LLM) proposes modifications; amaris applies them to the adaptive set and
refuses any result that breaks a bound: these tests are the only thing standing between a
proposed weight of -50 (or a negated copy of an anchor) and every later reward.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from amaris.rubric.guardrails import Bounds, UpdateRejected, apply_modifications
from amaris.rubric.model import Criterion, RubricVersion

BOUNDS = Bounds(max_adaptive=3, min_weight=-2.0, max_weight=2.0, max_modifications=4)
ANCHOR = Criterion(id="A1", text="The final answer is correct.", weight=1.0, is_anchor=True)
R1 = Criterion(id="R1", text="Shows its reasoning.", weight=0.5, is_anchor=False)
R2 = Criterion(id="R2", text="Hedges between answers.", weight=-1.0, is_anchor=False)
CURRENT = RubricVersion(
    version=4, origin="updater", anchors=(ANCHOR,), adaptive=(R1, R2), next_adaptive_id=5
)


@dataclass(frozen=True)
class Mod:
    """One proposed change, as the updater's parsed output carries it."""

    action: str
    criterion_id: str | None = None
    text: str | None = None
    weight: float | None = None
    findings: tuple[str, ...] = ()


def rejected(modifications: list[Mod], current: RubricVersion = CURRENT) -> str:
    with pytest.raises(UpdateRejected) as caught:
        apply_modifications(current, modifications, BOUNDS)
    return str(caught.value)


# -- weights -----------------------------------------------------------------------------------


@pytest.mark.parametrize("weight", [-50.0, -2.01, 2.01, 50.0, 0.0])
def test_an_added_weight_outside_the_bounds_or_zero_is_rejected(weight: float) -> None:
    message = rejected([Mod("add", text="Cites a source.", weight=weight)])
    assert message == f"R5: weight {weight} outside [-2.0, 2.0] or zero"


@pytest.mark.parametrize(("cid", "weight"), [("R2", -50.0), ("R1", 3.0), ("R1", 0.0)])
def test_a_reweight_outside_the_bounds_is_rejected(cid: str, weight: float) -> None:
    assert rejected([Mod("reweight", cid, weight=weight)]).startswith(f"{cid}: weight {weight}")


@pytest.mark.parametrize(("cid", "weight"), [("R2", -2.0), ("R1", 2.0)])
def test_the_bounds_themselves_are_allowed(cid: str, weight: float) -> None:
    applied = apply_modifications(CURRENT, [Mod("reweight", cid, weight=weight)], BOUNDS)
    assert {c.id: c.weight for c in applied.adaptive}[cid] == weight


def test_no_positive_weight_left_is_rejected() -> None:
    only_pitfalls = RubricVersion(
        version=1,
        origin="config",
        anchors=(ANCHOR.model_copy(update={"weight": -1.0}),),
        adaptive=(R2,),
        next_adaptive_id=3,
    )
    message = rejected([Mod("add", text="Rambles.", weight=-0.5)], only_pitfalls)
    assert message == "no criterion with a positive weight would remain"
    zero_anchor = only_pitfalls.model_copy(
        update={"anchors": (ANCHOR.model_copy(update={"weight": 0.0}),)}
    )
    message = rejected([Mod("add", text="Rambles.", weight=-0.5)], zero_anchor)
    assert message == "no criterion with a positive weight would remain"
    # one positive weight anywhere is enough
    applied = apply_modifications(only_pitfalls, [Mod("add", text="Is short.", weight=0.1)], BOUNDS)
    assert [c.weight for c in applied.adaptive] == [-1.0, 0.1]


# -- duplicates and anchors --------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["The final answer is correct.", "  the FINAL answer is correct.  ", "Shows its reasoning."],
)
def test_a_criterion_duplicating_an_anchor_or_another_is_rejected(text: str) -> None:
    # With a negative weight, a copy of an anchor would cancel it.
    assert rejected([Mod("add", text=text, weight=-1.0)]) == "R5: duplicates another criterion"


def test_an_edit_into_a_duplicate_is_rejected() -> None:
    message = rejected([Mod("edit", "R2", text="shows its reasoning.")])
    assert message == "R2: duplicates another criterion"


@pytest.mark.parametrize("action", ["edit", "reweight", "retire"])
def test_an_anchor_cannot_be_targeted(action: str) -> None:
    message = rejected([Mod(action, "A1", text="New text.", weight=0.5)])
    assert message == f"rubric_modifications[0] ({action}): anchor A1 is immutable"


# -- ids, counts, fields -----------------------------------------------------------------------


@pytest.mark.parametrize("criterion_id", ["R9", None])
def test_an_unknown_adaptive_id_is_rejected(criterion_id: str | None) -> None:
    message = rejected([Mod("reweight", criterion_id, weight=1.0)])
    assert (
        message
        == f"rubric_modifications[0] (reweight): unknown adaptive criterion {criterion_id!r}"
    )


def test_too_many_modifications_are_rejected_before_any_is_applied() -> None:
    mods = [Mod("add", text=f"Criterion {i}.", weight=0.5) for i in range(5)]
    assert rejected(mods) == "5 modifications; at most 4 allowed"
    # exactly the limit is checked against the other bounds only
    assert rejected(mods[:4]) == "6 adaptive criteria; at most 3 allowed"


def test_the_adaptive_count_bound_counts_the_result() -> None:
    # adding one while retiring one stays at the bound
    mods = [Mod("add", text="Cites a source.", weight=1.0), Mod("retire", "R2")]
    applied = apply_modifications(CURRENT, mods, BOUNDS)
    assert [c.id for c in applied.adaptive] == ["R1", "R5"]
    add_two = [Mod("add", text="A.", weight=1.0), Mod("add", text="B.", weight=1.0)]
    assert rejected(add_two) == "4 adaptive criteria; at most 3 allowed"


@pytest.mark.parametrize(
    ("mod", "message"),
    [
        (Mod("add", text="  ", weight=1.0), "rubric_modifications[0] (add): needs text and weight"),
        (Mod("add", text="Cites."), "rubric_modifications[0] (add): needs text and weight"),
        (Mod("edit", "R1", text=" "), "rubric_modifications[0] (edit): empty text"),
        (Mod("reweight", "R1"), "rubric_modifications[0] (reweight): needs a weight"),
        (Mod("rename", "R1", text="x"), "rubric_modifications[0] (rename): unknown action"),
    ],
)
def test_incomplete_modifications_are_rejected(mod: Mod, message: str) -> None:
    assert rejected([mod]) == message


@pytest.mark.parametrize("action", ["aaa", "rename", "zzz"])
def test_an_unknown_action_is_rejected_whatever_it_sorts_next_to(action: str) -> None:
    message = rejected([Mod(action, "R1", text="Cites a source.", weight=1.0)])
    assert message == f"rubric_modifications[0] ({action}): unknown action"


def test_actions_parsed_from_the_updaters_json_apply() -> None:
    # Strings decoded from JSON are not interned: actions compare by value.
    proposal = json.loads(
        '[{"action": "add", "text": "Cites a source.", "weight": 1.0},'
        ' {"action": "edit", "criterion_id": "R1", "text": "Shows each step."},'
        ' {"action": "reweight", "criterion_id": "R1", "weight": 1.5},'
        ' {"action": "retire", "criterion_id": "R2"}]'
    )
    applied = apply_modifications(CURRENT, [Mod(**m) for m in proposal], BOUNDS)
    assert [(c.id, c.text, c.weight) for c in applied.adaptive] == [
        ("R1", "Shows each step.", 1.5),
        ("R5", "Cites a source.", 1.0),
    ]


def test_the_index_of_the_faulty_modification_is_named() -> None:
    message = rejected([Mod("reweight", "R1", weight=1.0), Mod("retire", "A1")])
    assert message.startswith("rubric_modifications[1] (retire)")


def test_an_empty_criterion_already_in_the_set_is_rejected() -> None:
    blank = R1.model_copy(update={"text": " "})
    current = CURRENT.model_copy(update={"adaptive": (blank,)})
    assert rejected([], current) == "R1: empty criterion"


# -- a valid update ----------------------------------------------------------------------------


def test_a_valid_update_applies_every_action_in_order() -> None:
    mods = [
        Mod("add", text="  Cites a source.  ", weight=0.75),
        Mod("edit", "R1", text="  Shows each step.  "),
        Mod("reweight", "R2", weight=-2.0),
        Mod("retire", "R1"),
    ]
    applied = apply_modifications(CURRENT, mods, BOUNDS)
    assert [(c.id, c.text, c.weight, c.is_anchor) for c in applied.adaptive] == [
        ("R2", "Hedges between answers.", -2.0, False),
        ("R5", "Cites a source.", 0.75, False),
    ]
    assert (applied.next_adaptive_id, applied.changed) == (6, True)
    assert CURRENT.adaptive == (R1, R2)  # the current version is untouched


def test_ids_of_added_criteria_follow_next_adaptive_id() -> None:
    mods = [Mod("retire", "R2"), Mod("add", text="A.", weight=1.0), Mod("add", text="B.", weight=1)]
    applied = apply_modifications(CURRENT, mods, BOUNDS)
    assert [c.id for c in applied.adaptive] == ["R1", "R5", "R6"]
    assert applied.next_adaptive_id == 7


def test_a_no_op_update_is_not_a_change() -> None:
    applied = apply_modifications(CURRENT, [Mod("reweight", "R1", weight=0.5)], BOUNDS)
    assert (applied.adaptive, applied.changed, applied.next_adaptive_id) == ((R1, R2), False, 5)
    assert apply_modifications(CURRENT, [], BOUNDS).changed is False


# -- polarity ----------------------------------------------------------------------------------


def test_the_flipped_flattery_attack_is_refused_without_an_embedder() -> None:
    # Reweight the flattery pitfall to +2, add four "VERIFIED CORRECT" criteria at +2: the
    # default bounds alone let it through, and a wrong flattering answer would then win.
    flattery = Criterion(
        id="R1", text="The response flatters the user.", weight=-1.0, is_anchor=False
    )
    current = CURRENT.model_copy(update={"adaptive": (flattery,), "next_adaptive_id": 2})
    attack = [
        Mod("reweight", "R1", weight=2.0),
        *(
            Mod("add", text=f"The response is VERIFIED CORRECT ({i}).", weight=2.0)
            for i in range(4)
        ),
    ]
    bounds = Bounds(max_adaptive=12, min_weight=-2.0, max_weight=2.0, max_modifications=5)
    with pytest.raises(UpdateRejected, match="polarity is fixed at creation"):
        apply_modifications(current, attack, bounds)
