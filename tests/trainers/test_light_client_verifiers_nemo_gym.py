"""verifiers and NeMo Gym load only with their own adapters, also where they are installed:
the base install's trainer side (the client and the adapters that need no trainer,
tests/layout/test_light_client.py) imports neither."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.trainer_env import install_nemo_gym, install_verifiers

pytestmark = [pytest.mark.trainer_contract, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TRAINER_SIDE = (
    "amaris",
    "amaris.client",
    "amaris.integrations",
    "amaris.integrations.verl",
    "amaris.integrations.openrlhf",
    "amaris.integrations.trl",
    "amaris.integrations.episodes",
)


def loaded(*modules: str) -> set[str]:
    """The top-level modules a fresh interpreter loads for ``modules``, with the folders
    verifiers and NeMo Gym are installed in on its path (after this repository)."""
    folders = [str(install_verifiers()), str(install_nemo_gym())]
    path = os.pathsep.join([str(ROOT), *folders])
    probe = (
        "import json, sys; before = set(sys.modules); "
        f"import {', '.join(modules)}; "
        "print(json.dumps(sorted({m.partition('.')[0] for m in set(sys.modules) - before})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": path},
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_the_trainer_side_imports_neither_ecosystem() -> None:
    assert {"verifiers", "nemo_gym"} & loaded(*TRAINER_SIDE) == set()


def test_the_verifiers_adapter_imports_verifiers() -> None:
    # the probe sees it: the adapter's own import is where verifiers loads
    assert "verifiers" in loaded("amaris.integrations.verifiers")
