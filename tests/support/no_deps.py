"""Packages a test tier installs itself, ``pip install --no-deps --target``, once per pin set.

Some packages the tiers need declare dependencies amaris must not install: verl and
OpenRLHF pin GPU-only builds (tests/trainer_env.py), and xgrammar, the constrained decoder
of the real-model tier, requires triton, a large GPU compiler that it imports
only for its GPU kernels; NeMo Gym declares a newer Python than amaris's while its code
runs on 3.11. Such packages are installed into ``.trainers/<pins>`` from the package index on
the first run (the other xdist worker waits on a lock), then reused, and appended to
``sys.path`` (after this repository and the venv)."""

from __future__ import annotations

import fcntl
import importlib
import importlib.util
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

TARGETS_DIR = Path(__file__).resolve().parents[2] / ".trainers"


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # the other xdist worker waits here
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def install_no_deps(pins: Mapping[str, str], flags: Sequence[str] = ()) -> Path:
    """``pins`` (name -> version) installed without their dependencies, once, with pip's
    ``flags`` (``--ignore-requires-python``); the folder is on ``sys.path`` (appended) and
    returned."""
    target = TARGETS_DIR / "-".join(f"{name}-{version}" for name, version in pins.items())
    done = target / ".installed"
    with _locked(TARGETS_DIR / ".lock"):
        if not done.exists():
            wanted = [f"{name}=={version}" for name, version in pins.items()]
            pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target"]
            subprocess.run([*pip, str(target), *flags, *wanted], check=True)
            done.touch()
    if str(target) not in sys.path:
        sys.path.append(str(target))
    return target


XGRAMMAR = {"xgrammar": "0.2.8", "apache-tvm-ffi": "0.1.15.post2"}
"""xgrammar and its one dependency amaris's venv lacks (the others, torch, transformers,
numpy, pydantic, are there); not triton: xgrammar imports it only for its GPU kernels."""


def import_xgrammar() -> ModuleType:
    """The ``xgrammar`` module, installed first if this venv lacks it."""
    if importlib.util.find_spec("xgrammar") is None:
        install_no_deps(XGRAMMAR)
    return importlib.import_module("xgrammar")
