"""What installing amaris puts into site-packages, and what guards the names it adds.

The repository keeps ``api/``, ``flows/``, ``tasks/`` and ``deployments/`` at its root (the
layout of docs/architecture.md), imported and installed as top-level packages of those
names beside ``amaris``: every file has one path. The ``amaris`` command refuses to run
when another package of one of those names comes first on the import path. The wheel is
built as pip builds it for a user (build isolation, setuptools from the package index)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROOT_PACKAGES = ("api", "flows", "tasks", "deployments")


@pytest.mark.slow
def test_the_wheel_installs_amaris_and_its_root_packages(tmp_path: Path) -> None:
    # Built from a copy: the build leaves no build/ folder here.
    tree = tmp_path / "tree"
    for name in ("pyproject.toml", "README.md"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tree / name)
    for package in ("amaris", *ROOT_PACKAGES):
        shutil.copytree(
            ROOT / package,
            tree / package,
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
    tops = {name.split("/")[0] for name in names}
    assert tops == {"amaris", *ROOT_PACKAGES, f"amaris-{version}.dist-info"}
    for package in ("amaris", *ROOT_PACKAGES):
        source = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / package).rglob("*.py"))
        assert sorted(n for n in names if n.startswith(f"{package}/") and n.endswith(".py")) == (
            source
        ), package


def test_no_file_of_the_tree_is_a_link() -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert [line for line in listed if line.startswith("120000")] == []


def test_a_folder_that_hides_a_root_package_is_named_and_nothing_runs(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "__init__.py").write_text("")
    script = "import sys\nfrom amaris.cli.entry import main\nsys.exit(main(['--help']))\n"
    # run from that folder, as ``python -m`` from a project with its own tasks/ would be
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 1
    assert f"tasks ({tmp_path / 'tasks' / '__init__.py'})" in done.stderr
    assert done.stdout == ""
    # the same command from the repository's root
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "usage: amaris" in done.stdout
