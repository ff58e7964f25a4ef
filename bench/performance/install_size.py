"""Install time and installed size: the client-only install against the service's.

For each kind, a fresh virtualenv (``python3 -m venv``, not timed) and one timed
``pip install --no-cache-dir`` of a copy of this repository (``git ls-files`` of the
working tree, or ``git archive`` of ``--ref``), non-editable, as a user installs it:

* ``client``: ``pip install .``: the base install, the trainer side;
* ``server``: ``pip install -c constraints.txt ".[server]"``: the reward service;
* ``dev``: ``pip install -c constraints.txt ".[dev]"``: everything, with the test tools.

Reported per kind: wall time of the ``pip install``, the size the install added to the
venv (``du`` of the venv minus the fresh venv's), the number of distributions it added,
whether torch, Prefect, FastAPI and qdrant-client came with it; in every venv, the
third-party top-level modules that ``import amaris.client, amaris.integrations.{verl,
openrlhf,trl}`` loads; and what ``amaris --help`` answers (exit code, first line).

The package index is local here (file:// indexes and a find-links folder), so the times
are install work (resolving, unpacking, compiling bytecode), not network.

Usage::

    .venv/bin/python -m bench.performance.install_size [--kinds client,server] [--ref REF] [--write]
        [--smoke]

``--write`` replaces this benchmark's section of ``docs/benchmarks.md``. ``--smoke``: the
client install alone (the smallest).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import ROOT, doc_section, markers, write_doc

KINDS = {
    "client": ("", False),
    "server": ("[server]", True),
    "dev": ("[dev]", True),
}
"""kind -> (extras, with constraints.txt)."""

SERVER_PACKAGES = ("torch", "prefect", "fastapi", "qdrant_client")

IMPORT_PROBE = """
import json, sys
import amaris.client, amaris.integrations.verl, amaris.integrations.openrlhf
import amaris.integrations.trl
own = {"amaris"}
tops = {name.partition(".")[0] for name in sys.modules}
print(json.dumps(sorted(t for t in tops if t not in sys.stdlib_module_names
                        and t not in own and not t.startswith("_"))))
"""

HAS_PROBE = """
import importlib.util, json, sys
print(json.dumps({n: importlib.util.find_spec(n) is not None for n in sys.argv[1:]}))
"""


def source_tree(destination: Path, ref: str | None) -> None:
    """This repository's files into ``destination``: the working tree's tracked files,
    or the tree of ``ref``."""
    destination.mkdir(parents=True)
    if ref is not None:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", ref],
            check=True,
            capture_output=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(destination, filter="data")
        return
    listed = (
        subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], check=True, capture_output=True)
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def du_bytes(path: Path) -> int:
    return int(
        subprocess.run(
            ["du", "-sb", str(path)], check=True, capture_output=True, text=True
        ).stdout.split()[0]
    )


def distributions(python: Path) -> set[str]:
    out = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return {entry["name"].lower() for entry in json.loads(out)}


def measure(kind: str, ref: str | None, work: Path) -> dict[str, object]:
    extras, constrained = KINDS[kind]
    source = work / "src"
    source_tree(source, ref)
    venv = work / "venv"
    subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    before_size, before_dists = du_bytes(venv), distributions(python)
    command = [str(python), "-m", "pip", "install", "-q", "--no-cache-dir"]
    if constrained and (source / "constraints.txt").is_file():
        command += ["-c", str(source / "constraints.txt")]
    command.append(f"{source}{extras}")
    started = time.monotonic()
    subprocess.run(
        command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=work
    )
    seconds = time.monotonic() - started
    added = du_bytes(venv) - before_size
    dists = distributions(python) - before_dists
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}

    def probe(*args: str) -> Any:
        """The JSON a probe script prints in the fresh venv."""
        done = subprocess.run(
            [str(python), "-c", *args],
            check=True,
            capture_output=True,
            text=True,
            cwd=work,
            env=env,
        )
        return json.loads(done.stdout)

    has = probe(HAS_PROBE, *SERVER_PACKAGES)
    loaded = probe(IMPORT_PROBE)
    cli = subprocess.run(
        [str(venv / "bin" / "amaris"), "--help"], capture_output=True, text=True, cwd=work, env=env
    )
    first = (cli.stderr or cli.stdout).strip().splitlines()
    return {
        "kind": kind,
        "seconds": seconds,
        "added_mb": added / 1e6,
        "distributions": len(dists),
        "has": has,
        "client_imports": loaded,
        "cli_exit": cli.returncode,
        "cli_first_line": first[0] if first else "",
        "torch": next((d for d in dists if d == "torch"), None),
    }


def section(ref: str | None) -> str:
    """This benchmark's section of the document: one for the working tree, one per ref."""
    return "install_size" if ref is None else f"install_size_at_{ref}"


def report(results: list[dict[str, object]], ref: str | None) -> str:
    lines = [
        "| install | command | pip install (s) | added to the venv (MB) | distributions "
        "| torch / prefect / fastapi / qdrant_client | third-party modules the client loads "
        "| `amaris --help` exits |",
        "|---|---|---:|---:|---:|---|---:|---:|",
    ]
    for result in results:
        extras, constrained = KINDS[str(result["kind"])]
        command = (
            "pip install "
            + ("-c constraints.txt " if constrained else "")
            + (f'".{extras}"' if extras else ".")
        )
        has = result["has"]
        assert isinstance(has, dict)
        marks = " / ".join("yes" if has[name] else "no" for name in SERVER_PACKAGES)
        modules = result["client_imports"]
        assert isinstance(modules, list)
        lines.append(
            f"| {result['kind']} | `{command}` | {result['seconds']:.1f} | "
            f"{result['added_mb']:.0f} | {result['distributions']} | {marks} | {len(modules)} "
            f"| {result['cli_exit']} |"
        )
    source = f"the tree of `{ref}`" if ref else "the working tree"
    return doc_section(
        section(ref),
        "Install time and installed size: client-only vs. service"
        + (f" (at {ref})" if ref else ""),
        f"A fresh venv per install of {source}, from a local package index (file://) with "
        "`--no-cache-dir`: the time is install work, not network; compare sizes, not seconds. "
        "The client modules are those `import amaris.client, amaris.integrations.{verl,"
        "openrlhf,trl}` loads.",
        "\n".join(lines),
        script=__file__,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default="client,server")
    parser.add_argument("--ref", default=None, help="install this git ref's tree instead")
    parser.add_argument(
        "--write",
        action="store_true",
        help="replace this benchmark's section of docs/benchmarks.md",
    )
    parser.add_argument("--smoke", action="store_true", help="the client install alone")
    args = parser.parse_args(argv)
    if args.smoke and args.write:
        parser.error("--smoke: its figures do not go to docs/benchmarks.md")
    if args.smoke:
        args.kinds = "client"
    results = []
    for kind in args.kinds.split(","):
        with tempfile.TemporaryDirectory(prefix=f"amaris-install-{kind}-") as work:
            result = measure(kind, args.ref, Path(work))
        print(json.dumps(result), flush=True)
        results.append(result)
    text = report(results, args.ref)
    print(text)
    if args.write:
        write_doc(ROOT / "docs" / "benchmarks.md", text, *markers(section(args.ref)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
