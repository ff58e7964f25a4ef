"""Where production code leaves JSON open: ``dict[str, Any]`` and every name for it.

``dict[str, Any]`` belongs only where JSON of unknown shape is the point, each use saying
so. An alias (``JSONDict = dict[str, Any]``, ``DataBlock = JSONDict``...) only
renames it, so this counts, in every module of ``amaris``, ``api``, ``flows``, ``tasks`` and
``deployments``:

- each ``dict``, ``Dict``, ``Mapping`` or ``MutableMapping`` subscripted ``[str, Any]``,
  ``[str, object]`` or ``[str, JsonValue]`` (a literal), wherever it is written
  (annotation, alias, ``cast``);
- each use of a name that is such a type: a module-level alias of one, of another alias,
  or of ``Annotated[<one of them>, ...]``, followed through ``from ... import``.

Import lines are not uses. A use is *explained* when its line carries a ``#`` comment or
follows a comment line, or, for a use of an alias, when the alias's definition is explained
(a comment there, or the docstring under it): the alias's name and docstring say which JSON
it is.

Run ``python -m tests.support.open_json`` (add ``-v`` to list each use) for the table of
docs/architecture.md.
"""

from __future__ import annotations

import ast
import functools
import io
import sys
import tokenize
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("amaris", "api", "flows", "tasks", "deployments")
_MAPPINGS = frozenset({"dict", "Dict", "Mapping", "MutableMapping"})
_OPEN_VALUES = frozenset({"Any", "object", "JsonValue", "JSONValue"})
"""Value types that leave an object's shape open: pydantic's ``JsonValue`` (any JSON) too."""


@dataclass(frozen=True)
class Use:
    """One place production code leaves a JSON object's shape open."""

    path: str
    """Relative to the repository root, e.g. ``amaris/llm/schema.py``."""
    line: int
    text: str
    """The type as written: ``dict[str, Any]`` or an alias's name."""
    explained: bool
    literal: bool
    """Written as ``dict[str, Any]`` (or its kin), not as an alias's name."""

    @property
    def part(self) -> str:
        """``amaris/<package>`` (``amaris`` for its top-level modules), else the root
        folder: ``api``, ``flows``, ``tasks``, ``deployments``."""
        parts = Path(self.path).parts
        if parts[0] == "amaris" and len(parts) > 2:
            return f"amaris/{parts[1]}"
        return parts[0]


@dataclass
class _Module:
    path: str
    tree: ast.Module
    comment_lines: set[int]
    code_lines: set[int]
    imports: dict[str, tuple[str, str]]
    """Local name -> (module, name) of each ``from module import name``."""


def _files() -> list[Path]:
    return [
        path.relative_to(ROOT)
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    ]


def _module_name(rel: Path) -> str:
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _parse(rel: Path) -> _Module:
    text = (ROOT / rel).read_text(encoding="utf-8")
    comments: set[int] = set()
    code: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            comments.add(token.start[0])
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            code.update(range(token.start[0], token.end[0] + 1))
    tree = ast.parse(text)
    imports: dict[str, tuple[str, str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                imports[alias.asname or alias.name] = (node.module, alias.name)
    return _Module(str(rel), tree, comments, code, imports)


def _literal(node: ast.AST) -> bool:
    """``dict[str, Any]`` and its kin (see the module's docstring)."""
    if not isinstance(node, ast.Subscript):
        return False
    base = node.value
    name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)
    if name not in _MAPPINGS or not isinstance(node.slice, ast.Tuple):
        return False
    if len(node.slice.elts) != 2:
        return False
    key, value = node.slice.elts
    return ast.unparse(key) == "str" and ast.unparse(value).split(".")[-1] in _OPEN_VALUES


class _Scan:
    def __init__(self) -> None:
        self.modules = {_module_name(rel): _parse(rel) for rel in _files()}
        self.aliases: dict[tuple[str, str], bool] = {}
        """(module, name) of each alias -> whether its definition is explained."""
        self._find_aliases()

    def _resolve(self, module: str, name: str) -> tuple[str, str]:
        key = (module, name)
        for _ in range(10):
            imported = self.modules[key[0]].imports if key[0] in self.modules else {}
            if key in self.aliases or key[1] not in imported:
                return key
            key = imported[key[1]]
        return key

    def _alias_use(self, module: str, node: ast.AST) -> tuple[str, str] | None:
        if isinstance(node, ast.Name):
            key = self._resolve(module, node.id)
            if key in self.aliases:
                return key
        return None

    def _open(self, module: str, node: ast.AST) -> bool:
        if _literal(node) or self._alias_use(module, node):
            return True
        if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("Annotated"):
            inner = node.slice.elts[0] if isinstance(node.slice, ast.Tuple) else node.slice
            return self._open(module, inner)
        return False

    def _find_aliases(self) -> None:
        changed = True
        while changed:
            changed = False
            for name, module in self.modules.items():
                body = module.tree.body
                for index, statement in enumerate(body):
                    target, value = _alias_parts(statement)
                    if target is None or value is None or (name, target) in self.aliases:
                        continue
                    if self._open(name, value):
                        following = body[index + 1] if index + 1 < len(body) else None
                        documented = _is_docstring(following) or self._commented(
                            module, statement.lineno
                        )
                        self.aliases[(name, target)] = documented
                        changed = True

    @staticmethod
    def _commented(module: _Module, line: int) -> bool:
        above = line - 1
        return line in module.comment_lines or (
            above in module.comment_lines and above not in module.code_lines
        )

    def uses(self) -> list[Use]:
        found: list[Use] = []
        for name, module in self.modules.items():
            for node in ast.walk(module.tree):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    continue  # an alias's name where it is defined: its value counts
                alias = self._alias_use(name, node)
                if not (alias or _literal(node)):
                    continue
                line = node.lineno  # type: ignore[attr-defined]  # Name or Subscript
                explained = self._commented(module, line) or (
                    alias is not None and self.aliases[alias]
                )
                if not explained:
                    explained = self._in_explained_alias(name, module, line)
                found.append(Use(module.path, line, ast.unparse(node), explained, alias is None))
        return sorted(found, key=lambda use: (use.path, use.line))

    def _in_explained_alias(self, name: str, module: _Module, line: int) -> bool:
        """A literal or alias written on the line that defines an explained alias."""
        for statement in module.tree.body:
            target, _ = _alias_parts(statement)
            if target is not None and statement.lineno == line:
                return self.aliases.get((name, target), False)
        return False


def _alias_parts(statement: ast.stmt) -> tuple[str | None, ast.expr | None]:
    """(name, value) of a module-level ``Name = value`` or ``Name: TypeAlias = value``."""
    if (
        isinstance(statement, ast.Assign)
        and len(statement.targets) == 1
        and isinstance(statement.targets[0], ast.Name)
    ):
        return statement.targets[0].id, statement.value
    if (
        isinstance(statement, ast.AnnAssign)
        and isinstance(statement.target, ast.Name)
        and statement.value is not None
        and "TypeAlias" in ast.unparse(statement.annotation)
    ):
        return statement.target.id, statement.value
    return None, None


def _is_docstring(statement: ast.stmt | None) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


@functools.cache
def _scan() -> _Scan:
    return _Scan()


def open_json_uses() -> list[Use]:
    """Every use of an open JSON object type in production code (module docstring)."""
    return _scan().uses()


def open_json_aliases() -> list[str]:
    """``module.Name`` of each alias of an open JSON object type."""
    return sorted(f"{module}.{name}" for module, name in _scan().aliases)


def per_part(uses: list[Use]) -> Counter[str]:
    """How many uses each part (:attr:`Use.part`) has."""
    return Counter(use.part for use in uses)


def main(argv: list[str]) -> int:
    """Print the uses per part (and each use with ``-v``)."""
    uses = open_json_uses()
    counts = per_part(uses)
    literal = per_part([use for use in uses if use.literal])
    print("| part | uses | of them written `dict[str, Any]` or kin |\n|---|---:|---:|")
    for part in sorted(counts):
        print(f"| {part} | {counts[part]} | {literal[part]} |")
    print(f"| **total** | **{len(uses)}** | **{sum(literal.values())}** |")
    unexplained = [use for use in uses if not use.explained]
    print(f"\naliases: {', '.join(open_json_aliases())}")
    print(f"unexplained: {len(unexplained)}")
    for use in uses if "-v" in argv else unexplained:
        mark = "" if use.explained else "  (no comment)"
        print(f"{use.path}:{use.line}: {use.text}{mark}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
