"""What the rollout log keeps of a rollout (amaris/memory/records.py), fixture-free
(``--noconftest``: the mutation run of ``rollout_records``): the JSON a writer
set, stored without ``seq`` and with text as written, lone surrogates made storable,
records of older versions read back with their defaults and unknown fields kept."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from amaris.memory.records import LoggedRollout, LoggedVerdict, RolloutRecord

WRITTEN = {
    "rollout": {"id": "r1", "output": "réponse ✓ 答"},
    "score": 0.5,
    "verdicts": [{"id": "A1", "verdict": 3}],
    "tokens": 7,  # a field this version does not know
}


def test_a_record_is_the_json_its_writer_set_in_field_order() -> None:
    record = RolloutRecord.model_validate(WRITTEN)
    assert record.to_json() == WRITTEN
    assert list(record.to_json()) == ["rollout", "score", "verdicts", "tokens"]
    with_seq = RolloutRecord.model_validate({**WRITTEN, "seq": 4})
    assert with_seq.to_json() == {**WRITTEN, "seq": 4}
    assert with_seq.to_json(seq=False) == WRITTEN
    assert record.to_json(seq=False) == WRITTEN


def test_the_stored_line_has_no_seq_and_the_text_as_written() -> None:
    text = RolloutRecord.model_validate({**WRITTEN, "seq": 4}).dumps()
    assert "\n" not in text
    assert '"réponse ✓ 答"' in text  # not \\u escapes
    assert json.loads(text) == WRITTEN


def test_a_lone_surrogate_is_stored_replaced() -> None:
    record = RolloutRecord.model_validate(
        {"rollout": {"id": "r\ud800", "output": "x \udfff y"}, "reason": "\ud83d"}
    )
    text = record.dumps()
    text.encode("utf-8")  # storable
    assert json.loads(text) == {
        "rollout": {"id": "r\ufffd", "output": "x \ufffd y"},
        "reason": "\ufffd",
    }


def test_a_stored_line_reads_back_with_its_number_or_without() -> None:
    text = RolloutRecord.model_validate(WRITTEN).dumps()
    assert RolloutRecord.loads(text).to_json() == WRITTEN
    assert RolloutRecord.loads(text).seq is None
    assert RolloutRecord.loads(text, 0).to_json() == {**WRITTEN, "seq": 0}
    assert RolloutRecord.loads(text, 12).seq == 12


def test_an_old_record_holding_a_lone_surrogate_stays_readable() -> None:
    old = '{"rollout": {"id": "r1", "output": "bad \\ud800"}}'
    assert RolloutRecord.loads(old, 2).rollout.output == "bad \ud800"


def test_an_old_record_gets_the_defaults_of_what_it_lacks() -> None:
    record = RolloutRecord.loads(
        '{"rollout": {"id": "r1"}, "verdicts": [{"id": "A1", "verdict": 2}]}'
    )
    assert (record.scope, record.step, record.late, record.metadata) == ("global", 0, False, {})
    assert (record.score, record.status, record.reason, record.time) == (None, None, None, None)
    assert (record.rubric_version, record.request_id) == (None, None)
    (verdict,) = record.verdicts
    assert verdict == LoggedVerdict(id="A1", verdict=2)
    assert (verdict.text, verdict.weight, verdict.is_anchor) == ("", 0.0, False)
    assert (verdict.kind, verdict.reason) == ("judge", None)
    rollout = record.rollout
    assert (rollout.input, rollout.output, rollout.supplemental_context) == ("", "", None)
    assert (rollout.metadata, rollout.group_id) == (None, None)
    assert record.to_json() == {"rollout": {"id": "r1"}, "verdicts": [{"id": "A1", "verdict": 2}]}


def test_records_are_frozen() -> None:
    record = RolloutRecord.model_validate(WRITTEN)
    with pytest.raises(ValidationError):
        record.score = 1.0  # type: ignore[misc]
    with pytest.raises(ValidationError):
        record.rollout.output = "x"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        LoggedVerdict(id="A1", verdict=1).verdict = 2  # type: ignore[misc]
    assert LoggedRollout(id="r", extra_field=1).model_extra == {"extra_field": 1}
    assert LoggedVerdict(id="A1", verdict=1, extra=2).model_extra == {"extra": 2}
