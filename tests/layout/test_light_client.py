"""The base install is the trainer side: the client and the adapters load no server stack.

``pip install amaris`` installs httpx and pydantic only (pyproject.toml
``dependencies``); the service is the ``server`` extra. These tests import the trainer
side in a fresh interpreter of this venv (which has every extra) and check what it
loaded; ``bench/performance/install_size.py`` installs the base package in a fresh venv.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution, packages_distributions

from packaging.requirements import Requirement

from amaris.cli.entry import missing_extra

TRAINER_SIDE = (
    "amaris",
    "amaris.client",
    "amaris.step_answer",
    "amaris.integrations.verl",
    "amaris.integrations.openrlhf",
    "amaris.integrations.trl",
)
SERVER_STACK = {
    "re2",
    "prefect",
    "fastapi",
    "starlette",
    "uvicorn",
    "torch",
    "qdrant_client",
    "sentence_transformers",
    "openai",
    "sqlalchemy",
    "yaml",
    "json_repair",
    "prometheus_client",
    "matplotlib",
}


def _loaded_top_level_modules(*modules: str) -> set[str]:
    """The top-level modules that importing ``modules`` loads in a fresh interpreter
    (beyond those loaded at its start-up)."""
    probe = (
        "import json, sys; before = set(sys.modules); "
        f"import {', '.join(modules)}; "
        "print(json.dumps(sorted({m.partition('.')[0] for m in set(sys.modules) - before})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True, timeout=120
    ).stdout
    return set(json.loads(out))


def _base_closure() -> set[str]:
    """The distributions the base install may load: amaris's requirements without an
    extra marker, with their own extras (httpx, when it finds click and rich, imports
    them for its command line), and the requirements of all those, as installed here."""
    seen: set[str] = set()
    todo = [("amaris", False)]
    while todo:
        name, with_extras = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = distribution(name).requires or []
        except PackageNotFoundError:
            continue
        for line in requires:
            requirement = Requirement(line)
            if (
                with_extras
                or requirement.marker is None
                or requirement.marker.evaluate({"extra": ""})
            ):
                todo.append((requirement.name.lower().replace("_", "-"), name == "amaris"))
    return seen


def test_the_trainer_side_loads_only_the_base_dependencies() -> None:
    loaded = _loaded_top_level_modules(*TRAINER_SIDE)
    assert "amaris" in loaded and "httpx" in loaded and "pydantic" in loaded
    assert loaded & SERVER_STACK == set()
    # Every third-party module it loads comes from a distribution of the base install.
    providers = packages_distributions()
    base = _base_closure()
    third_party = {
        m for m in loaded - set(sys.stdlib_module_names) if m in providers and m != "amaris"
    }
    outside = {
        m: providers[m]
        for m in third_party
        if not {d.lower().replace("_", "-") for d in providers[m]} & base
    }
    assert outside == {}
    assert {"httpx", "pydantic"} <= base and "prefect" not in base and "torch" not in base


def test_the_client_reads_the_step_answer_without_the_servers_models() -> None:
    # The step answer the client returns is the server's response model, yet importing the
    # client loads neither the agents' models (re2) nor the service.
    loaded = _loaded_top_level_modules("amaris.client")
    assert {"re2", "prefect", "qdrant_client", "fastapi"} & loaded == set()
    assert "pydantic" in loaded


def test_the_probe_sees_a_server_import() -> None:
    # The same probe and closure, on modules of the service: they load the server stack,
    # from distributions outside the base install.
    loaded = _loaded_top_level_modules("api.app", "flows.step_pipeline")
    assert {"prefect", "fastapi"} <= loaded
    assert {"prefect", "fastapi"} & _base_closure() == set()


def test_amaris_without_the_server_extra_names_it() -> None:
    # The console script in a client-only install: the server stack cannot be imported
    # (here: None in sys.modules, which makes its import fail as a missing module does).
    script = (
        "import sys\n"
        "for name in ('yaml', 'prefect', 'fastapi', 'qdrant_client', 'torch'):\n"
        "    sys.modules[name] = None\n"
        "from amaris.cli.entry import main\n"
        "sys.exit(main(['serve']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert "pip install 'amaris[server]'" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_a_missing_extra_is_named_and_a_missing_own_module_is_a_bug() -> None:
    assert missing_extra(ModuleNotFoundError("x", name="prefect.client")) == "server"
    assert missing_extra(ModuleNotFoundError("x", name="matplotlib.pyplot")) == "sim"
    assert missing_extra(ModuleNotFoundError("x", name="amaris.nowhere")) is None
    assert missing_extra(ModuleNotFoundError("x")) is None


def test_the_offline_judge_server_loads_no_store_or_orchestrator() -> None:
    # `amaris offline-llm` answers from rules: Qdrant's client and Prefect are not its.
    loaded = _loaded_top_level_modules("amaris.sim.judge_server")
    assert not loaded & {"qdrant_client", "prefect", "torch", "sentence_transformers"}, loaded
