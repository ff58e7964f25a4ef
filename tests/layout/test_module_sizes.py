"""One job per module, and no production module over 450 lines.

Every module of the installed code is held to it: ``amaris/`` and the packages at the root,
``api``, ``flows``, ``tasks`` and ``deployments``.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 450


PACKAGES = ("amaris", "api", "flows", "tasks", "deployments")


def production_modules() -> list[Path]:
    return [path for folder in PACKAGES for path in sorted((ROOT / folder).rglob("*.py"))]


def test_the_walk_sees_every_part() -> None:
    parts = {path.relative_to(ROOT).parts[0] for path in production_modules()}
    assert parts == {"amaris", "api", "flows", "tasks", "deployments"}
    names = {path.relative_to(ROOT).as_posix() for path in production_modules()}
    assert {"amaris/scoring/scorer.py", "flows/step_pipeline.py", "api/app.py"} <= names


def test_no_production_module_is_over_450_lines() -> None:
    sizes = {
        path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in production_modules()
    }
    assert {path: n for path, n in sizes.items() if n > LIMIT} == {}
