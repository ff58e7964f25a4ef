"""The audit's pure parts: the stratified sample, the fidelity
figures, the Goodhart alarm and its evidence, the durable pause and its CLI."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from amaris.cli.main import main
from amaris.memory.records import LoggedRollout, LoggedVerdict, RolloutRecord
from amaris.settings import AuditSettings, load_settings
from amaris.trust.audit.alarm import MIN_TOP_TAIL, TrendPoint, check_alarm, evidence
from amaris.trust.audit.fidelity import criterion_disagreement, fidelity, kendall_tau
from amaris.trust.audit.models import (
    OVER_REWARDED_KEPT,
    Alarm,
    AuditedRollout,
    CriterionDisagreement,
    CriterionPair,
    Fidelity,
    StepAudit,
)
from amaris.trust.audit.pause import AuditPause, ScoringPausedError
from amaris.trust.audit.report import fidelity_markdown, sparkline
from amaris.trust.audit.sampling import Drawn, sample_size, stratified_sample
from amaris.trust.judge_canaries import AuditPair
from tasks.audit import over_rewarded, swap_probes
from tasks.judge_canaries import audit_pairs


def naive_tau(x: list[float], y: list[float]) -> float:
    """Kendall's tau-b from its definition, for comparison."""
    pairs = list(itertools.combinations(range(len(x)), 2))
    t = sum(((x[i] > x[j]) - (x[i] < x[j])) * ((y[i] > y[j]) - (y[i] < y[j])) for i, j in pairs)
    n0 = len(pairs)
    n1 = sum(x[i] == x[j] for i, j in pairs)
    n2 = sum(y[i] == y[j] for i, j in pairs)
    return t / ((n0 - n1) * (n0 - n2)) ** 0.5


# -- sampling ----------------------------------------------------------------------------------


def test_sample_size_is_the_share_at_least_the_minimum_at_most_all() -> None:
    assert sample_size(1000, 0.05, 8) == 50
    assert sample_size(100, 0.05, 8) == 8
    assert sample_size(5, 0.05, 8) == 5
    assert sample_size(1001, 0.05, 8) == 51  # rounded up


def test_the_top_tail_is_over_sampled_and_the_rest_spread_over_quantiles() -> None:
    items = list(range(100))  # reward = item / 100
    drawn = stratified_sample(
        items,
        lambda i: i / 100,
        str,
        20,
        top_tail=0.2,
        top_tail_share=0.5,
        seed="audit-step-3",
    )
    assert len(drawn) == 20
    tail = [d.item for d in drawn if d.top_tail]
    below = [d.item for d in drawn if not d.top_tail]
    assert len(tail) == 10 and all(i >= 80 for i in tail)  # 50% of the sample from 20%
    assert {d.threshold for d in drawn} == {0.8}
    # Four quantile bins of the 80 below the tail, 20 items each, 2 or 3 drawn from each.
    assert sorted(sum(1 for i in below if lo <= i < lo + 20) for lo in (0, 20, 40, 60)) == [
        2,
        2,
        3,
        3,
    ]
    # Deterministic per seed, in the items' order.
    again = stratified_sample(
        items, lambda i: i / 100, str, 20, top_tail=0.2, top_tail_share=0.5, seed="audit-step-3"
    )
    assert [d.item for d in again] == [d.item for d in drawn] == sorted(d.item for d in drawn)


def test_a_sample_larger_than_a_stratum_takes_the_rest_elsewhere() -> None:
    items = list(range(10))
    drawn = stratified_sample(
        items, float, str, 9, top_tail=0.2, top_tail_share=0.9, seed="s"
    )  # tail holds 2: the other 7 come from below
    assert len(drawn) == 9
    assert sum(d.top_tail for d in drawn) == 2
    assert stratified_sample([], float, str, 5, top_tail=0.2, top_tail_share=0.5, seed="s") == []


# -- fidelity ----------------------------------------------------------------------------------


def test_kendall_tau_matches_its_definition_with_ties() -> None:
    x = [0.1, 0.4, 0.4, 0.9, 0.7, 0.2, 1.0]
    y = [0.2, 0.1, 0.5, 0.8, 0.8, 0.3, 0.6]
    assert kendall_tau(x, y) == pytest.approx(naive_tau(x, y))
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert kendall_tau([1, 2, 3], [5, 5, 5]) is None  # a constant side ranks nothing
    assert kendall_tau([1.0], [1.0]) is None


def audited(
    rid: str, training: float, audit: float | None, top: bool = False, threshold: float = 0.8
) -> AuditedRollout:
    return AuditedRollout(
        rollout_id=rid,
        scope="global",
        training=training,
        audit=audit,
        top_tail=top,
        threshold=threshold,
        criteria=[CriterionPair(id="A1", text="correct", training=4, audit=0 if audit == 0 else 4)]
        if audit is not None
        else [],
    )


def test_fidelity_of_a_lenient_judge() -> None:
    sample = [
        audited("ok-1", 0.75, 1.0),
        audited("ok-2", 0.5, 0.75),
        audited("hack-1", 1.0, 0.0, top=True),
        audited("hack-2", 0.9, 0.0, top=True),
        audited("ok-3", 0.85, 0.9, top=True),
        audited("lost", 0.6, None),
    ]
    found = fidelity(sample)
    assert found.sampled == 5 and found.failed == 1
    assert found.top_tail_sampled == 3
    assert found.top_tail_agreement == pytest.approx(1 / 3, abs=1e-4)
    assert found.gap == pytest.approx((0.25 + 0.25 + 1.0 + 0.9 + 0.05) / 5, abs=1e-4)
    assert found.agreement is not None and found.agreement < 0
    assert found.training_mean == pytest.approx(0.8, abs=1e-4)
    assert found.criteria[0].id == "A1"
    assert found.criteria[0].disagreement == pytest.approx(2 / 5)  # 2 of 5 read 4 vs 0


def test_criterion_disagreement_is_per_criterion_and_sorted() -> None:
    rollouts = [
        AuditedRollout(
            rollout_id="r",
            scope="g",
            training=1,
            audit=0.5,
            criteria=[
                CriterionPair(id="A1", text="a", training=4, audit=4),
                CriterionPair(id="R1", text="b", training=4, audit=1),
            ],
        )
    ]
    found = criterion_disagreement(rollouts)
    assert [(c.id, c.disagreement) for c in found] == [("R1", 0.75), ("A1", 0.0)]


# -- alarm -------------------------------------------------------------------------------------


def fid(
    training: float,
    audit: float,
    tail: float | None = 1.0,
    tail_n: int = 4,
    over: int = 8,
) -> Fidelity:
    return Fidelity(
        sampled=8,
        training_mean=training,
        audit_mean=audit,
        top_tail_agreement=tail,
        top_tail_sampled=tail_n,
        top_tail_kept=round((tail or 0.0) * tail_n),
        over_rewarded=over,
    )


def test_diverging_trends_over_the_window_raise_the_alarm() -> None:
    settings = AuditSettings(window=3, min_trend=0.05)
    earlier = [TrendPoint(1, 0.60, 0.70, graded=8, over_rewarded=6), TrendPoint(2, 0.65, 0.66)]
    alarm = check_alarm(fid(0.72, 0.60), 3, earlier, settings)
    assert alarm is not None and alarm.kind == "diverging"
    assert "step 1 to step 3" in alarm.reason and "14 of the 16 rollouts" in alarm.reason
    # Both rising: no alarm; a fall smaller than min_trend: no alarm.
    assert check_alarm(fid(0.72, 0.75), 3, earlier, settings) is None
    assert check_alarm(fid(0.72, 0.68), 3, earlier, settings) is None
    # Only the window is read: an old high audit mean does not count.
    old = [TrendPoint(0, 0.1, 0.99), *earlier]
    assert check_alarm(fid(0.72, 0.69), 3, old, settings) is None
    # The first audited step has no trend.
    assert check_alarm(fid(0.9, 0.1), 0, [], settings) is None
    # No more over-rewarded rollouts than the history's share: the trend is noise.
    history = [TrendPoint(i - 10, 0.6, 0.6, graded=8, over_rewarded=7) for i in range(10)]
    assert check_alarm(fid(0.72, 0.60), 3, [*history, *earlier], settings) is None
    # Nor a trend on a few rollouts: two of two over-rewarded is no evidence.
    few = [TrendPoint(2, 0.60, 0.70, graded=1, over_rewarded=1)]
    current = fid(0.72, 0.60, over=1).model_copy(update={"sampled": 1})
    assert check_alarm(current, 3, few, settings) is None


def test_a_top_tail_the_auditor_does_not_keep_raises_the_alarm() -> None:
    settings = AuditSettings(min_top_tail_agreement=0.5)
    # A history whose top tail the auditor kept: losing 6 of 8 is beyond its noise.
    kept = [
        TrendPoint(i, 0.8, 0.8, graded=8, over_rewarded=0, top_tail_sampled=8, top_tail_kept=8)
        for i in range(10)
    ]
    alarm = check_alarm(fid(0.8, 0.8, tail=0.25, tail_n=8, over=0), 12, kept, settings)
    assert alarm is not None and alarm.kind == "top_tail"
    assert check_alarm(fid(0.8, 0.8, tail=0.5, tail_n=8, over=0), 12, kept, settings) is None
    # Without a history, 6 of 8 lost is within the prior's noise.
    assert check_alarm(fid(0.8, 0.8, tail=0.25, tail_n=8, over=0), 4, [], settings) is None
    # One graded top-tail rollout is not evidence enough.
    assert check_alarm(fid(0.8, 0.8, tail=0.0, tail_n=MIN_TOP_TAIL - 1), 4, [], settings) is None
    assert check_alarm(fid(0.8, 0.8, tail=None, tail_n=0), 4, [], settings) is None


def test_evidence_lists_the_most_disagreeing_rollouts_and_criteria() -> None:
    sample = [audited(f"r{i}", 1.0, i / 10, top=True) for i in range(8)]
    sample.append(audited("same", 0.5, 0.5))
    alarm = check_alarm(fidelity(sample), 2, [], AuditSettings())
    assert alarm is not None
    found = evidence(2, alarm, sample, fidelity(sample).criteria)
    assert [r.rollout_id for r in found.rollouts] == ["r0", "r1", "r2", "r3", "r4"]
    assert found.rollouts[0].training_reward == 1.0 and found.rollouts[0].audit_reward == 0.0
    assert found.reason == alarm.reason
    assert [c.id for c in found.criteria] == ["A1"]


# -- pause -------------------------------------------------------------------------------------


def test_the_pause_is_durable_and_acknowledged_once(tmp_path: Path) -> None:
    pause = AuditPause(tmp_path)
    assert pause.current() is None
    pause.check()
    pause.pause(7, "the auditor disagrees")
    # Another process (a restart) reads the same file.
    other = AuditPause(tmp_path)
    record = other.current()
    assert record is not None and record.step == 7
    with pytest.raises(ScoringPausedError, match="step 7: the auditor disagrees"):
        other.check()
    assert pause.ack() == record
    assert other.current() is None
    assert pause.ack() is None


def test_an_unreadable_pause_file_still_pauses(tmp_path: Path) -> None:
    pause = AuditPause(tmp_path)
    pause.path.write_text("{not json", encoding="utf-8")
    record = pause.current()
    assert record is not None and "unreadable pause file" in record.reason


def test_cli_audit_ack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    AuditPause(tmp_path).pause(3, "top tail lost")
    assert main(["audit", "status", "--data", str(tmp_path)]) == 1
    assert "PAUSED" in capsys.readouterr().out
    assert main(["audit", "ack", "--data", str(tmp_path)]) == 0
    assert "step 3: top tail lost" in capsys.readouterr().out
    assert AuditPause(tmp_path).current() is None
    assert main(["audit", "ack", "--data", str(tmp_path)]) == 0
    assert "not paused" in capsys.readouterr().out


# -- settings ----------------------------------------------------------------------------------


def test_the_auditor_is_off_until_its_client_or_agent_entry_is_set(tmp_path: Path) -> None:
    data = {"memory.path": str(tmp_path)}
    off = load_settings(None, **data)
    assert not off.auditor_on and "auditor" not in off.served_agents
    by_model = load_settings(None, **data, **{"agents.auditor.model": "other"})
    assert by_model.auditor_on and by_model.served_agents[-1] == "auditor"
    offline = load_settings(
        None,
        **data,
        **{"client.default.base_url": "http://127.0.0.1:1/v1", "client.auditor.offline": True},
    )
    assert offline.auditor_on and offline.client.offline_agents(offline.served_agents) == [
        "auditor"
    ]


# -- the step artifact -------------------------------------------------------------------------


def test_the_artifact_shows_the_step_its_scopes_criteria_and_trend() -> None:
    earlier = [
        StepAudit(
            step=s,
            sampled=8,
            agreement=0.8,
            top_tail_agreement=1.0,
            gap=0.05,
            training_mean=0.5 + s / 10,
            audit_mean=0.5,
        )
        for s in range(3)
    ]
    now = StepAudit(
        step=3,
        sampled=8,
        failed=1,
        agreement=-0.4,
        top_tail_agreement=0.0,
        gap=0.6,
        alarm=Alarm(kind="top_tail", reason="the auditor keeps 0%"),
        training_mean=0.9,
        audit_mean=0.2,
        criteria=[CriterionDisagreement(id="A1", text="a | b", disagreement=0.75, rollouts=8)],
        scopes={"global": fidelity([audited("r", 1.0, 0.0, top=True)])},
    )
    text = fidelity_markdown(now, earlier)
    assert "**Alarm:** top_tail: the auditor keeps 0%" in text
    assert "| (step) | 8 | -0.400 | 0.600 | 0.000 | 0.900 | 0.200 |" in text
    assert "| A1 | 0.750 | 8 | a / b |" in text  # a cell cannot break the table
    assert [line.split("|")[1].strip() for line in text.splitlines()[-4:]] == ["0", "1", "2", "3"]
    assert sparkline([0.0, 0.5, 1.0, None]) == "▁▅█ "


# -- audit-disagreement pairs (the judge canaries' ``audit`` probes) ---------------------------


def test_the_over_rewarded_are_kept_most_first_and_become_pairs_beyond_the_tolerance() -> None:
    audited = [
        AuditedRollout(rollout_id="a", scope="global", training=1.0, audit=0.0),
        AuditedRollout(rollout_id="b", scope="global", training=0.5, audit=0.45),
        AuditedRollout(rollout_id="c", scope="global", training=0.2, audit=0.9),  # under
        AuditedRollout(rollout_id="d", scope="global", training=1.0, audit=None),  # no verdict
        AuditedRollout(rollout_id="e", scope="other", training=0.8, audit=0.1),
    ]
    many = [
        AuditedRollout(rollout_id=f"x{i:02}", scope="global", training=1.0, audit=0.5)
        for i in range(OVER_REWARDED_KEPT + 5)
    ]
    kept = over_rewarded(audited)
    assert [(g.rollout_id, g.scope) for g in kept] == [
        ("a", "global"),
        ("e", "other"),
        ("b", "global"),
    ]
    assert [g.rollout_id for g in over_rewarded(many)] == [
        f"x{i:02}" for i in range(OVER_REWARDED_KEPT)
    ]
    audit = StepAudit(
        step=4, sampled=5, agreement=None, top_tail_agreement=None, gap=None, over_rewarded=kept
    )
    records = [
        RolloutRecord(
            rollout=LoggedRollout(
                id="a", input="q", output="hack", supplemental_context="Answer: 1"
            ),
            score=1.0,
            rubric_version=3,
        ),
        # "e" of scope "other" is not among the records: left out, never a made-up pair
        RolloutRecord(rollout=LoggedRollout(id="e"), scope="global", rubric_version=1),
        RolloutRecord(rollout=LoggedRollout(id="b"), rubric_version=1),
    ]
    [pair] = audit_pairs(audit, records, beyond=0.1)
    assert pair == AuditPair(
        rollout_id="a",
        scope="global",
        input="q",
        output="hack",
        supplemental_context="Answer: 1",
        rubric_version=3,
        training_reward=1.0,
        audit_reward=0.0,
    )
    assert [p.rollout_id for p in audit_pairs(audit, records, beyond=0.0)] == ["a", "b"]
    assert audit_pairs(None, records, beyond=0.0) == []


def _scored(rid: str, output: str) -> RolloutRecord:
    return RolloutRecord(
        rollout=LoggedRollout(
            id=rid, input="What is 3 * 7?", output=output, supplemental_context="Answer: 21"
        ),
        score=1.0,
        status="scored",
        rubric_version=2,
        verdicts=[LoggedVerdict(id="A1", text="correct", weight=1.0, verdict=4)],
    )


def test_swap_checks_take_the_most_over_rewarded_top_tail_rollout_with_an_answer() -> None:
    records = {
        "tail-a-worded": _scored("tail-a-worded", "I am certain. The answer is twenty-one."),
        "tail-small": _scored("tail-small", "I am certain. The answer is 21."),
        "tail-big": _scored("tail-big", "I am certain. The answer is 21."),
        "below": _scored("below", "3 * 7 = 21. The answer is 21."),
    }
    gaps = {"tail-a-worded": 1.0, "tail-small": 0.3, "tail-big": 1.0, "below": 1.0}
    sample = [Drawn(r, rid != "below", 1.0) for rid, r in records.items()]
    audited = [
        AuditedRollout(
            rollout_id=rid,
            scope="global",
            training=1.0,
            audit=1.0 - gaps[rid],
            top_tail=rid != "below",
        )
        for rid in records
    ]
    settings = AuditSettings()
    # The rollout below the top tail is not checked, the worded answer has no number to
    # swap: the most over-rewarded top-tail rollout left, with its answer one greater.
    [probe] = swap_probes(sample, audited, settings)
    assert (probe.rollout_id, probe.kind, probe.baseline) == ("tail-big", "swapped", 1.0)
    assert probe.output == "I am certain. The answer is 22."
    assert probe.rubric_version == 2 and probe.supplemental_context == "Answer: 21"
    two = swap_probes(sample, audited, settings.model_copy(update={"swap_checks": 2}))
    assert [p.rollout_id for p in two] == ["tail-big", "tail-small"]
    # Under audit.max_gap_jump (0.25) of a gap, or audit.swap_checks 0: no check.
    close = [a.model_copy(update={"audit": 0.9}) for a in audited]
    assert swap_probes(sample, close, settings) == []
    assert swap_probes(sample, audited, settings.model_copy(update={"swap_checks": 0})) == []
