"""The markers mean something: ``pytest -m "not slow"`` is the quick loop.

Real processes (amaris, the real-model server) start only in tests marked ``slow``, and
every test of the real-model tier is marked ``slow``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.procs import amaris_process, run_amaris


def test_a_quick_test_may_not_start_a_real_process(tmp_path: Path) -> None:
    with pytest.raises(
        RuntimeError,
        match=re.escape("amaris rubrics starts a real process: mark the test @pytest.mark.slow"),
    ):
        run_amaris(["rubrics", "show"], tmp_path)
    with (
        pytest.raises(RuntimeError, match="amaris serve starts a real process"),
        amaris_process(["serve"], tmp_path, "http://127.0.0.1:9/healthz", tmp_path / "log"),
    ):
        pass
    assert not (tmp_path / "log").exists()  # refused before anything started


def test_the_real_model_tier_is_left_out_of_the_quick_loop(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("from tests.support.markers import pytest_collection_modifyitems\n")
    pytester.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
        "markers =\n    slow: s\n    real_model: r\n"
    )
    pytester.makepyfile(
        test_tier="""
        import pytest

        @pytest.fixture
        def real_llm():
            return None

        @pytest.mark.real_model
        def test_marked():
            pass

        def test_by_fixture(real_llm):
            pass

        def test_quick():
            pass
    """
    )
    quick = pytester.runpytest_inprocess("-m", "not slow")
    quick.assert_outcomes(passed=1, deselected=2)
    tier = pytester.runpytest_inprocess("-m", "slow and real_model")
    tier.assert_outcomes(passed=2, deselected=1)
