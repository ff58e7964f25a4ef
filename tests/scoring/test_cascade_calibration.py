"""The cascade's calibration (:mod:`amaris.scoring.calibration`): the threshold of a set of
pairs, its recalibration as pairs accrue, the bounded pairs persisted across restarts, the
audits left for it; and the confidence of one criterion's verdict.

Pure functions and files under ``tmp_path``: no conftest fixture."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from amaris.scoring.calibration import (
    AUDIT_FOLDER,
    CALIBRATION_FILE,
    Calibration,
    Pair,
    drop_audit,
    lower_bound,
    stratum,
    take_audits,
    threshold,
)
from amaris.scoring.verdicts import criterion_confidence, margin
from amaris.settings import CascadeSettings
from amaris.trust.audit.models import AuditedRollout


def agree(confidence: float, weight: float = 1.0) -> Pair:
    return Pair(confidence, 0.80, 0.83, weight)  # within 0.05


def differ(confidence: float, weight: float = 1.0) -> Pair:
    return Pair(confidence, 0.80, 0.20, weight)


def test_the_threshold_is_the_lowest_confidence_that_holds_the_target() -> None:
    # 100 sure pairs that agree, two that do not at 0.95, 100 more that agree at 0.8, and
    # below them agreement fades (each confidence in a stratum of its own).
    pairs = [agree(0.9995 + i / 1e6) for i in range(100)] + [differ(0.95)] * 2
    pairs += [agree(0.8)] * 100 + [differ(0.3)] * 30
    assert len({stratum(p.confidence) for p in pairs}) == 4
    # >= 0.95: 100 of 102 agree (bound 0.961); >= 0.8: 200 of 202; >= 0.3: 200 of 232.
    assert threshold(pairs, 0.95, 0.05, min_pairs=8) == 0.8
    # At 0.99 only the first hundred hold it (bound 100/101).
    assert threshold(pairs, 0.99, 0.05, min_pairs=8) == 0.9995
    # A looser tolerance makes every pair agree: the lowest confidence decides.
    assert threshold(pairs, 0.95, 0.7, min_pairs=8) == 0.3


def test_confidences_are_strata_of_their_doubt() -> None:
    # Half a decade of 1 - confidence each; a sure confidence is the top one.
    assert [stratum(c) for c in (0.0, 0.5, 0.7, 0.9, 0.95, 0.99, 0.997, 0.999)] == [
        0,
        0,
        1,
        2,
        2,
        4,
        5,
        6,
    ]
    assert stratum(1.0) > stratum(1 - 1e-15) > stratum(0.9999)


def test_the_pairs_of_a_stratum_are_alike_draws_of_its_rollouts() -> None:
    # One stratum of sure verdicts: 300 pairs escalated while the cheap path was closed
    # (weight 1), 5 of which disagree, and 30 probes standing for ten rollouts each, 2 of
    # which disagree. Taken pair by pair the two unlucky probes weigh as forty escalated
    # pairs (share 0.958 over 109 effective pairs: bound under 0.95); in the stratum, each
    # pair stands for 600 / 330 rollouts: 323 of 330 agree.
    sure = [agree(0.9995)] * 295 + [differ(0.9995)] * 5
    sure += [agree(0.9995, weight=10.0)] * 28 + [differ(0.9995, weight=10.0)] * 2
    assert threshold(sure, 0.95, 0.05, min_pairs=8) == 0.9995
    # Across strata the weights still count: probes of a sure stratum that all agree
    # stand for its rollouts above the escalated pairs of a doubtful one.
    low = [agree(0.5)] * 57 + [differ(0.5)] * 3
    assert threshold([*low, *[agree(0.9995, weight=10.0)] * 30], 0.96, 0.05, 8) == 0.5


def test_the_agreement_is_held_at_its_lower_bound() -> None:
    assert lower_bound(1.0, 19) == pytest.approx(0.95)  # n / (n + 1) when all agree
    assert lower_bound(0.96, 1e6) == pytest.approx(0.96, abs=1e-3)
    assert lower_bound(0.96, 50) < 0.95 < lower_bound(0.96, 500)
    # A few lucky pairs do not open the cheap path; enough of them do.
    mixed = [agree(0.5), differ(0.5)] * 15
    assert threshold([agree(0.99)] * 5 + mixed, 0.95, 0.05, min_pairs=8) == math.inf
    assert threshold([agree(0.99)] * 25 + mixed, 0.95, 0.05, min_pairs=8) == 0.99


def test_no_threshold_under_min_pairs_or_when_none_holds() -> None:
    assert threshold([agree(0.9)] * 18, 0.95, 0.05, min_pairs=19) == math.inf
    assert threshold([agree(0.9)] * 19, 0.95, 0.05, min_pairs=19) == 0.9
    assert threshold([differ(0.9)] * 30, 0.95, 0.05, min_pairs=8) == math.inf


def test_a_probe_stands_for_the_confident_rollouts_not_paired() -> None:
    # Escalated pairs (weight 1) at 0.5 agree 57 times in 60; thirty probes above them,
    # drawn with share 0.1, agree. Weighted, they stand for the 300 confident rollouts.
    low = [agree(0.5)] * 57 + [differ(0.5)] * 3
    assert threshold([*low, *[agree(0.8)] * 30], 0.95, 0.05, min_pairs=8) == 0.8
    assert threshold([*low, *[agree(0.8, weight=10.0)] * 30], 0.95, 0.05, min_pairs=8) == 0.5


def test_a_stratum_weighs_the_rollouts_counted_in_it() -> None:
    # Sixty escalated pairs at 0.998 agree; two probes at 0.99999 (weight 10), one of
    # which disagrees. Summed, their weights make that stratum twenty rollouts, ten of them
    # disagreeing: nothing holds. Counted, it held two rollouts: one disagrees in 62.
    pairs = [agree(0.998)] * 60 + [agree(0.99999, weight=10.0), differ(0.99999, weight=10.0)]
    assert threshold(pairs, 0.95, 0.05, min_pairs=8) == math.inf
    counted = {stratum(0.99999): 2.0, stratum(0.998): 60.0}
    assert threshold(pairs, 0.95, 0.05, min_pairs=8, population=counted) == 0.998


def test_a_stratum_without_pairs_counts_with_the_next_less_confident() -> None:
    # 60 sure pairs agree; at 0.998, 19 of 20. Two hundred rollouts at 0.9999 were never
    # paired: they go with the 0.998 stratum, whose share of agreement they take, so the
    # cheap path opens at 0.998 only while they are not there.
    pairs = [agree(0.99999)] * 60 + [agree(0.998)] * 19 + [differ(0.998)]
    sure, unpaired, lower = stratum(0.99999), stratum(0.9999), stratum(0.998)
    assert threshold(pairs, 0.95, 0.05, 8, {sure: 60.0, lower: 20.0}) == 0.998
    assert threshold(pairs, 0.95, 0.05, 8, {sure: 60.0, unpaired: 200.0, lower: 20.0}) == 0.99999


def test_the_rollouts_counted_go_with_the_pairs_kept(tmp_path: Path) -> None:
    settings = CascadeSettings(min_pairs=2, max_pairs=2)
    calibration = Calibration(settings, tmp_path)
    for confidence in (0.5, 0.5, 0.998):
        calibration.observe(confidence)
    calibration.add([agree(0.998)])
    calibration.observe(0.998)
    calibration.add([agree(0.998)])
    calibration.observe(0.99999)  # not paired yet
    assert calibration.population() == {stratum(0.5): 2.0, stratum(0.998): 2.0, 10: 1.0}
    calibration.add([differ(0.5)])  # the oldest pair leaves, and the rollouts before it
    assert calibration.population() == {stratum(0.998): 1.0, 10: 1.0}
    calibration.save(calibration.snapshot())
    again = Calibration(settings, tmp_path)
    assert again.population() == calibration.population() and again.pairs == calibration.pairs
    # A file written without the counts: each pair stands for its weight.
    stored = json.loads((tmp_path / CALIBRATION_FILE).read_text())
    stored["pairs"][0][3] = 10.0
    del stored["counts"], stored["pending"]
    (tmp_path / CALIBRATION_FILE).write_text(json.dumps(stored))
    assert Calibration(settings, tmp_path).population() == {stratum(0.998): 10.0, 0: 1.0}


def test_recalibrated_as_pairs_accrue_and_bounded() -> None:
    settings = CascadeSettings(min_pairs=4, max_pairs=6, target_agreement=0.75)
    calibration = Calibration(settings)
    assert calibration.threshold == math.inf
    assert calibration.add([agree(0.9), agree(0.8), agree(0.7)]) is False
    assert calibration.add([agree(0.6)]) is True  # min_pairs reached
    assert calibration.threshold == 0.6  # 4 of 4: bound 0.8
    # every min(16, min_pairs) = 4 new pairs: three more change nothing yet
    assert calibration.add([differ(0.95), differ(0.95), differ(0.95)]) is False
    assert calibration.threshold == 0.6
    assert calibration.add([differ(0.95)]) is True
    # the newest 6 kept: 0.7 and 0.6 that agree, four sure ones that do not
    assert [p.confidence for p in calibration.pairs] == [0.7, 0.6, 0.95, 0.95, 0.95, 0.95]
    assert calibration.threshold == math.inf


def test_pairs_persist_and_the_threshold_is_computed_again_on_load(tmp_path: Path) -> None:
    settings = CascadeSettings(min_pairs=4, target_agreement=0.75)
    calibration = Calibration(settings, tmp_path)
    calibration.add([agree(0.9)] * 16 + [differ(0.3)] * 4)
    calibration.save(calibration.snapshot())
    stored = json.loads((tmp_path / CALIBRATION_FILE).read_text())
    assert stored["threshold"] == 0.9 and len(stored["pairs"]) == 20
    again = Calibration(settings, tmp_path)
    assert again.pairs == calibration.pairs and again.threshold == 0.9
    # under a stricter configuration the same pairs give its own threshold
    stricter = CascadeSettings(min_pairs=32, target_agreement=0.75)
    assert Calibration(stricter, tmp_path).threshold == math.inf


def test_an_unreadable_calibration_starts_afresh(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / CALIBRATION_FILE).write_text("{not json")
    calibration = Calibration(CascadeSettings(min_pairs=1), tmp_path)
    assert calibration.pairs == () and calibration.threshold == math.inf
    assert "unreadable" in caplog.text


def test_an_audit_left_for_the_cascade_is_read_once(tmp_path: Path) -> None:
    audited = [
        AuditedRollout(rollout_id="a", scope="global", training=0.5, audit=0.25),
        AuditedRollout(rollout_id="b", scope="global", training=1.0, audit=None, failure="x"),
        AuditedRollout(rollout_id="c", scope="global", training=1.0, audit=1.0),
    ]
    drop_audit(tmp_path, 3, audited, population=40)
    (drop,) = take_audits(tmp_path)
    assert (drop.step, drop.rewards) == (3, {"a": 0.25, "c": 1.0})
    assert drop.weight == 20.0  # 40 judged rollouts, 2 re-graded
    assert take_audits(tmp_path) == []
    (tmp_path / AUDIT_FOLDER / "step-4.json").write_text("[]")
    assert take_audits(tmp_path) == [] and not any((tmp_path / AUDIT_FOLDER).iterdir())


def test_a_criterions_confidence() -> None:
    assert margin({4: 0.9, 3: 0.1}) == pytest.approx(0.8)
    assert margin({4: 1.0}) == 1.0 and margin({2: 0.5, 3: 0.5}) == 0.0
    # logprobs of every reply: their mean margin, whatever the samples' agreement
    assert criterion_confidence([0.8, 0.6], samples=2, agreement=0.5) == pytest.approx(0.7)
    # a reply without logprobs: the samples' agreement
    assert criterion_confidence([0.8], samples=2, agreement=0.5) == 0.5
    # one reply, no logprobs: no signal
    assert criterion_confidence([], samples=1, agreement=1.0) == 0.0
