"""What installing amaris puts into site-packages: one top-level package.

The repository keeps ``api/``, ``flows/``, ``tasks/`` and ``deployments/`` at its root (the
layout of docs/architecture.md); they are installed inside the ``amaris`` package
(``amaris.api``, ...: links in ``amaris/`` to the root folders), so an installed amaris
adds no top-level module that another distribution or a user's project of that name would
collide with. The wheel is built as pip builds it for a user (build isolation, setuptools
from the package index)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINKED = ("api", "flows", "tasks", "deployments")


@pytest.mark.slow
def test_the_wheel_installs_one_top_level_package(tmp_path: Path) -> None:
    # Built from a copy (the links kept as links): the build leaves no build/ folder here.
    tree = tmp_path / "tree"
    for name in ("pyproject.toml", "README.md"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tree / name)
    for package in ("amaris", *LINKED):
        shutil.copytree(
            ROOT / package,
            tree / package,
            symlinks=True,
            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
        )
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(tree)],
        check=True,
        timeout=600,
    )
    [wheel] = wheels.glob("amaris-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    version = wheel.name.split("-")[1]
    assert {name.split("/")[0] for name in names} == {"amaris", f"amaris-{version}.dist-info"}
    for package in LINKED:
        # The package's files are in the wheel as files (the links resolved), under amaris/.
        source = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / package).rglob("*.py"))
        installed = sorted(
            n.removeprefix("amaris/") for n in names if n.startswith(f"amaris/{package}/")
        )
        assert installed == source, package


def test_the_root_folders_are_the_installed_subpackages() -> None:
    # amaris/<name> is a link to the root folder: one copy of the code, two ways to reach it.
    for package in LINKED:
        link = ROOT / "amaris" / package
        assert link.is_symlink() and link.resolve() == (ROOT / package).resolve()
