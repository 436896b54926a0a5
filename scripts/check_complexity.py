"""Fail when a product function's cyclomatic complexity exceeds the limit.

radon (as a library) counts each function, method and closure of the product
packages (``[tool.check_complexity] packages``; migrations left out). radon
counts boolean operators and comprehensions too, so it sees more than ruff's
C901: the limit here (15) is higher than ruff's (12) and catches what hides
in conditions. An entry of ``[[tool.check_complexity.allowed]]`` lets one
function stay above the limit: ``where`` is ``path:qualified name``, and
``reason`` must say why. An entry that no longer matches a function over the
limit fails the check too, so the list shrinks as functions are split.

Usage: ``python scripts/check_complexity.py`` (from the repository root).
"""

import sys
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radon.complexity import cc_visit

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LIMIT = 15


@dataclass(frozen=True)
class Finding:
    where: str  # path:qualified name
    complexity: int


@dataclass(frozen=True)
class Config:
    packages: tuple[str, ...]
    limit: int
    allowed: dict[str, str]  # where -> reason


def load_config(pyproject: Path) -> tuple[Config, list[str]]:
    """The configuration, and its problems (an entry without a reason, twice listed)."""
    section = tomllib.loads(pyproject.read_text())["tool"]["check_complexity"]
    problems: list[str] = []
    allowed: dict[str, str] = {}
    for entry in section.get("allowed", []):
        where, reason = str(entry.get("where", "")), str(entry.get("reason", "")).strip()
        if not where:
            problems.append(f"allow-list entry without 'where': {entry}")
            continue
        if not reason:
            problems.append(f"{where}: allow-list entry without a reason")
        if where in allowed:
            problems.append(f"{where}: listed twice")
        allowed[where] = reason
    config = Config(
        packages=tuple(section["packages"]), limit=int(section.get("limit", DEFAULT_LIMIT)), allowed=allowed
    )
    return config, problems


def _blocks(blocks: Sequence[Any], prefix: str = "") -> Iterator[tuple[str, int]]:
    """(qualified name, complexity) of every function, method and closure.

    radon lists a class's methods among the functions too (with their class
    name), so classes themselves (whose number is their methods' sum) are skipped.
    """
    for block in blocks:
        if not hasattr(block, "closures"):  # a class
            continue
        name = f"{prefix}{block.fullname}"
        yield name, block.complexity
        yield from _blocks(block.closures, f"{name}.")


def check_source(path: str, source: str, limit: int) -> list[Finding]:
    return [
        Finding(f"{path}:{name}", complexity) for name, complexity in _blocks(cc_visit(source)) if complexity > limit
    ]


def product_files(root: Path, packages: Sequence[str]) -> Iterator[Path]:
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" not in path.relative_to(root).parts:
                yield path


def run(root: Path, config: Config) -> tuple[list[Finding], list[str]]:
    """(functions over the limit and not allowed, allow-list entries gone stale)."""
    found: list[Finding] = []
    for path in product_files(root, config.packages):
        found.extend(check_source(path.relative_to(root).as_posix(), path.read_text(), config.limit))
    over = {finding.where for finding in found}
    stale = sorted(where for where in config.allowed if where not in over)
    return [finding for finding in found if finding.where not in config.allowed], stale


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    root = Path(args[0]).resolve() if args else ROOT
    config, problems = load_config(root / "pyproject.toml")
    failures, stale = run(root, config)
    for problem in problems:
        print(f"pyproject.toml [tool.check_complexity]: {problem}")
    for where in stale:
        print(f"{where}: allowed, but not over {config.limit} (or gone): remove it from the allow-list")
    for finding in failures:
        print(f"{finding.where}: cyclomatic complexity {finding.complexity} > {config.limit}: split it")
    return 1 if problems or stale or failures else 0


if __name__ == "__main__":
    sys.exit(main())
