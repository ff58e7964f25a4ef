"""bench/probes/judge_reply_rss.py at its smoke size: a real amaris serve judging through a
fake judge that answers with a reply past the size limit: refused, not a reward."""

from __future__ import annotations

import re

import pytest

from bench.probes import judge_reply_rss as bench

pytestmark = pytest.mark.slow  # amaris serve and the fake judge


@pytest.mark.usefixtures("shared_prefect")
def test_the_smoke_run_refuses_the_oversized_reply(capsys: pytest.CaptureFixture[str]) -> None:
    bench.main(["--smoke"])
    printed = capsys.readouterr().out
    answers = re.findall(r"^  huge reply (\d+): \((\d+), '(\w+)', '(.*)'\)$", printed, re.M)
    assert [a[:3] for a in answers] == [("1", "200", "unscored")]
    assert answers[0][3].startswith("judge_oversize")
    assert re.search(
        r"^RSS before [\d.]+ MB, peak [\d.]+ MB, after [\d.]+ MB \(\+-?[\d.]+ MB\) after 1 "
        r"replies of 1 MB; load ",
        printed,
        re.M,
    ), printed
