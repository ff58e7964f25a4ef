"""The layers of the design hold on the import graph (docs/architecture.md, "Layers").

The contracts live in pyproject.toml ([tool.importlinter]): imports point down, no import
circle at any depth, and the trainer side (client, adapters, HTTP models) imports no
server stack. Function-level imports, which hide arrows from a reader, are allowed only
where a module says why (an optional dependency); so are imports by name (importlib), the
command line's dispatcher among them.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from importlinter import configuration
from importlinter.application.use_cases import lint_imports
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("amaris", "api", "flows", "tasks", "deployments")

FUNCTION_LEVEL_IMPORTS_ALLOWED = {
    # torch is the trainer's (OpenRLHF), not a dependency of amaris.
    "amaris/integrations/openrlhf.py": {"torch"},
    # matplotlib is the simulator's plotting extra.
    "amaris/sim/report.py": {"matplotlib", "matplotlib.pyplot", "matplotlib.ticker"},
    "amaris/sim/fidelity_plot.py": {"matplotlib", "matplotlib.pyplot", "matplotlib.ticker"},
}

IMPORTS_BY_NAME_ALLOWED = {
    # The command line's dispatcher (amaris.cli.main.run): a command's declaration names its
    # handler and environment step as "module:function", imported when the command runs,
    # after the step has set Prefect's environment (Prefect reads it once, at import), so
    # that `amaris --help` imports no service stack.
    "amaris/cli/main.py": 1,
    # The MiniLM embedder's package, torch and sentence_transformers (so that mypy does not
    # analyse torch), and openai for the OpenAI embedder: loaded when an embedder needs them.
    "amaris/memory/embedder.py": 4,
}
"""Modules that call ``importlib.import_module`` (or ``__import__``), and how many times."""

UNDECLARED_IMPORTS_ALLOWED = {
    # The trainer's, imported by the adapters that run inside its process (verl brings numpy).
    "torch",
    "verl",
    "openrlhf",
    "numpy",
    # The ecosystem's, imported only by its own adapter (amaris.integrations.<name>).
    "verifiers",
    "nemo_gym",
    # pydantic's core, which each pydantic release pins exactly: a second requirement on it
    # could only conflict.
    "pydantic_core",
}


def test_import_contracts_hold() -> None:
    # Every contract kept (the report names the import that breaks one). The use case, not
    # the command's body (importlinter.cli.lint_imports): that one also puts the working
    # directory on sys.path and configures logging with dictConfig, which disables every
    # logger of this process, Prefect's run loggers and amaris's among them.
    configuration.configure()  # what importlinter.cli and importlinter.api do at import
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_logo=True)


def function_level_imports(text: str) -> list[tuple[int, str]]:
    """(line, module) of each import in the source ``text`` made inside a function or a
    class, outside ``if TYPE_CHECKING:``."""
    tree = ast.parse(text)
    type_checking: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_checking.update(id(child) for child in ast.walk(node))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Import | ast.ImportFrom)
            and node.col_offset > 0
            and id(node) not in type_checking
        ):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or "."]
            )
            found.extend((node.lineno, name) for name in names)
    return found


def test_no_hidden_imports() -> None:
    hidden = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            allowed = FUNCTION_LEVEL_IMPORTS_ALLOWED.get(relative, set())
            for line, name in function_level_imports(path.read_text(encoding="utf-8")):
                if name not in allowed:
                    hidden.append(f"{relative}:{line} imports {name} inside a function")
    assert hidden == []


def imports_by_name(text: str) -> int:
    """Calls of ``importlib.import_module``, ``import_module`` or ``__import__`` in ``text``."""
    names = {"import_module", "__import__"}
    return sum(
        isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Attribute) and node.func.attr in names)
            or (isinstance(node.func, ast.Name) and node.func.id in names)
        )
        for node in ast.walk(ast.parse(text))
    )


def test_modules_are_imported_by_name_only_where_listed() -> None:
    # An import by name is a function-level import the check above cannot see.
    found = {
        path.relative_to(ROOT).as_posix(): count
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if (count := imports_by_name(path.read_text(encoding="utf-8")))
    }
    assert found == IMPORTS_BY_NAME_ALLOWED
    assert imports_by_name("import importlib\ndef f():\n    importlib.import_module('x')\n") == 1
    assert imports_by_name("def f():\n    return __import__('x')\n") == 1


def _third_party_imports() -> dict[str, str]:
    """Top-level third-party modules the packages import -> a file importing it."""
    found: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.partition(".")[0]
                    if top not in sys.stdlib_module_names and top not in PACKAGES:
                        found.setdefault(top, path.relative_to(ROOT).as_posix())
    return found


def test_every_third_party_import_is_declared() -> None:
    # A module imported directly comes from a distribution pyproject.toml names (base or an
    # extra), not only as another package's dependency.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"].values()
    lines = [*project["dependencies"], *(line for extra in extras for line in extra)]
    declared = {Requirement(line).name.lower().replace("_", "-") for line in lines}
    providers = packages_distributions()
    undeclared = {
        module: path
        for module, path in _third_party_imports().items()
        if module not in UNDECLARED_IMPORTS_ALLOWED
        and not {d.lower().replace("_", "-") for d in providers.get(module, [])} & declared
    }
    assert undeclared == {}


def test_the_checks_see_a_hidden_import() -> None:
    module = "import os\n\ndef f():\n    from amaris import settings\n    return settings\n"
    assert function_level_imports(module) == [(4, "amaris")]


def imports_of_test_modules(text: str) -> list[tuple[int, str]]:
    """Imports of ``conftest`` or of a test module (``test_*``): helpers live in
    ``tests/support/``, fixtures and hooks in ``conftest.py``."""

    def is_test_module(name: str) -> bool:
        last = name.rsplit(".", 1)[-1]
        return last == "conftest" or last.startswith("test_")

    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("tests")]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 0 and not module.startswith("tests"):
                continue
            names = [module, *(f"{module}.{a.name}" for a in node.names)]
        else:
            continue
        found += [(node.lineno, name) for name in names if name and is_test_module(name)]
    return found


def test_no_test_imports_from_conftest_or_another_test_module() -> None:
    found = {
        f"{path.relative_to(ROOT)}:{line}": name
        for folder in ("tests", "bench")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, name in imports_of_test_modules(path.read_text(encoding="utf-8"))
    }
    assert found == {}
    assert imports_of_test_modules("from tests.conftest import make_settings\n") == [
        (1, "tests.conftest")
    ]
    assert imports_of_test_modules("from tests.api import test_score\n") == [
        (1, "tests.api.test_score")
    ]
