"""The real-model tier's light modules import no model stack: the session's conftest, the
tier's tests and the benches that only start the server, fetch its model or build rollouts
(``tests/support/real_llm.py``) stay free of ``torch`` and ``transformers``, which only
the server process (``tests/support/real_llm_server.py``) and its engine load."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "safetensors")


def loaded_after(module: str) -> set[str]:
    """The heavy packages in ``sys.modules`` after a fresh interpreter imports ``module``."""
    probe = f"import sys, {module}; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return set(done.stdout.split())


def test_the_client_module_imports_no_model_stack() -> None:
    assert loaded_after("tests.support.real_llm") == set()
