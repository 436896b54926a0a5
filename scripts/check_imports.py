"""Import rules that import-linter cannot state (``make lint``, ``.ci/run``).

1. Imports sit at module top. An import inside a function hides a dependency
   (and usually a cycle) from readers and from import-linter's picture of the
   layers. Allowed without a listing: ``AppConfig.ready()`` (where apps wire
   themselves into core) and ``if TYPE_CHECKING:`` blocks. Anything else needs
   an entry in ``[tool.check_imports]`` of pyproject.toml with its reason.
2. No cycle among the module-level imports of the project's packages, a
   package and its own modules included (import-linter's ``acyclic_siblings``
   contract only compares siblings).

An allow-list entry that matches no import fails too: the list shrinks as
the code improves and never holds stale excuses.

Usage: ``python scripts/check_imports.py [--root DIR] [--config FILE] [PACKAGE ...]``
(the packages default to ``tool.check_imports.packages``). Exit status 1 on
any violation, each printed on its own line.
"""

import argparse
import ast
import sys
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SKIPPED_DIRS = {"migrations", "__pycache__"}


@dataclass(frozen=True)
class InnerImport:
    """An import statement inside a function: ``where`` is ``module.function`` (nested
    functions and methods by their dotted path), ``imports`` the absolute names it
    imports (``from a import b``: ``a`` and ``a.b``), which an allowance names one of."""

    path: Path
    line: int
    where: str
    statement: str
    imports: tuple[str, ...]


@dataclass(frozen=True)
class Allowance:
    where: str
    imports: str
    reason: str
    section: str


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def find_modules(root: Path, packages: Sequence[str]) -> list[Module]:
    modules = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if SKIPPED_DIRS & set(path.relative_to(root).parts):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            modules.append(Module(name=_module_name(root, path), path=path, tree=tree))
    return modules


def _imported(module: Module, node: ast.Import | ast.ImportFrom) -> list[str]:
    """Absolute names of what ``node`` imports (``from a import b`` gives ``a`` and ``a.b``:
    ``b`` may be a module or a name, the caller keeps what exists)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.name.split(".")
        if module.path.name != "__init__.py":
            package = package[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, base] if base else package)
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


ImportNode = ast.Import | ast.ImportFrom
# An import statement, the dotted scope it sits in, whether a function encloses it.
Found = tuple[ImportNode, tuple[str, ...], bool]


def _walk(node: ast.AST, scope: tuple[str, ...], in_function: bool) -> Iterator[Found]:
    """Every import under ``node`` with the dotted scope it sits in and whether a
    function encloses it; ``if TYPE_CHECKING:`` bodies are skipped (they never run)."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node, scope, in_function
        return
    children: list[ast.AST] = list(ast.iter_child_nodes(node))
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        children = list(node.orelse)
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        scope, in_function = (*scope, node.name), True
    elif isinstance(node, ast.ClassDef):
        scope = (*scope, node.name)
    for child in children:
        yield from _walk(child, scope, in_function)


def _is_ready(scope: tuple[str, ...]) -> bool:
    # AppConfig.ready(): the one place an app may import its own modules late.
    return len(scope) == 2 and scope[1] == "ready"


def inner_imports(modules: Sequence[Module]) -> list[InnerImport]:
    found = []
    for module in modules:
        for node, scope, in_function in _walk(module.tree, (), False):
            if not in_function or _is_ready(scope):
                continue
            found.append(
                InnerImport(
                    path=module.path,
                    line=node.lineno,
                    where=".".join((module.name, *scope)),
                    statement=ast.unparse(node),
                    imports=tuple(_imported(module, node)),
                )
            )
    return found


def import_graph(modules: Sequence[Module]) -> dict[str, set[str]]:
    """Module-level imports between the given modules (function bodies and
    ``if TYPE_CHECKING:`` blocks left out)."""
    names = {m.name for m in modules}
    graph: dict[str, set[str]] = {m.name: set() for m in modules}
    for module in modules:
        for node, _, in_function in _walk(module.tree, (), False):
            if in_function:
                continue
            for name in _imported(module, node):
                # The longest known module the name falls in ("a.b.func" -> "a.b").
                while name and name not in names:
                    name = name.rpartition(".")[0]
                if name and name != module.name:
                    graph[module.name].add(name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = counter
                    counter += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def load_config(path: Path) -> dict[str, Any]:
    with path.open("rb") as file:
        return dict(tomllib.load(file).get("tool", {}).get("check_imports", {}))


def allowances(config: dict[str, Any]) -> list[Allowance]:
    listed = []
    for section in ("allowed", "temporary"):
        for entry in config.get(section, []):
            if not str(entry.get("reason", "")).strip():
                raise ValueError(f"[tool.check_imports] {section}: {entry.get('where')} needs a reason")
            listed.append(
                Allowance(where=entry["where"], imports=entry["imports"], reason=entry["reason"], section=section)
            )
    return listed


def _allows(allowance: Allowance, found: InnerImport) -> bool:
    return allowance.where == found.where and allowance.imports in found.imports


def violations(root: Path, packages: Sequence[str], listed: Sequence[Allowance]) -> list[str]:
    modules = find_modules(root, packages)
    problems = []
    used: set[Allowance] = set()
    for found in inner_imports(modules):
        match = next((a for a in listed if _allows(a, found)), None)
        if match is None:
            location = found.path.relative_to(root)
            problems.append(
                f"{location}:{found.line}: `{found.statement}` inside {found.where}(): "
                "move it to the module top (or, for a true need, list it in [tool.check_imports] with its reason)"
            )
        else:
            used.add(match)
    for allowance in listed:
        if allowance not in used:
            problems.append(
                f"[tool.check_imports] {allowance.section}: {allowance.where} no longer imports "
                f"{allowance.imports} inside a function: remove the entry"
            )
    for component in cycles(import_graph(modules)):
        problems.append(f"import cycle among module-level imports: {' <-> '.join(component)}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check the project's import rules.")
    parser.add_argument("packages", nargs="*", help="top-level packages to check (default: from the config)")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="directory holding the packages")
    parser.add_argument("--config", type=Path, default=None, help="pyproject.toml (default: ROOT/pyproject.toml)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    config = load_config(args.config or root / "pyproject.toml")
    packages = args.packages or config.get("packages", [])
    if not packages:
        parser.error("no packages given and none in [tool.check_imports] packages")
    problems = violations(root, packages, allowances(config))
    for problem in problems:
        print(problem)
    if problems:
        print(f"check_imports: {len(problems)} problem(s)")
        return 1
    print(f"check_imports: {', '.join(packages)} clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
