"""bench/evaluations/mutation.py at its smoke size: cosmic-ray on a copy of the tree, one
mutant of one core module run against that module's tests, the others skipped; the result
recorded in ``--out``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.evaluations import mutation as bench

pytestmark = pytest.mark.slow  # cosmic-ray and pytest in processes of their own


def test_the_smoke_run_runs_one_mutant_and_records_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mutation.json"
    bench.main(["--smoke", "--out", str(out)])
    [(name, result)] = json.loads(out.read_text(encoding="utf-8")).items()
    assert name == bench.SMOKE_MODULE
    assert (result["module"], result["tests"]) == bench.MODULES[name]
    outcomes = result["outcomes"]
    assert outcomes.get("killed", 0) + outcomes.get("survived", 0) == 1
    filtered = outcomes.get("skipped", 0)  # the operators the run excludes
    assert outcomes["smoke-skipped"] == result["mutants"] - filtered - 1 > 0
    assert result["score"] in (0.0, 1.0)
    assert len(result["survivors"]) == outcomes.get("survived", 0)
    assert capsys.readouterr().out.startswith(f"{name}: {result['module']} mutants=")
