"""The complexity gate bites: scripts/check_complexity.py flags a function (and
a method, and a closure) over the limit, passes one at it, leaves migrations
out, holds its allow-list to reasoned and current entries, and passes on this
repository."""

import importlib.util
import textwrap
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _load_checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_complexity", ROOT / "scripts" / "check_complexity.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_complexity = _load_checker()


def branchy(name: str, branches: int, indent: str = "") -> str:
    """A function of complexity ``branches + 1``."""
    lines = [f"{indent}def {name}(x):"]
    lines += [f"{indent}    if x == {i}:\n{indent}        return {i}" for i in range(branches)]
    lines.append(f"{indent}    return -1")
    return "\n".join(lines) + "\n"


def test_a_function_over_the_limit_is_flagged_and_one_at_it_passes() -> None:
    source = branchy("over", 16) + branchy("at", 14)
    found = check_complexity.check_source("core/sample.py", source, 15)
    assert [(f.where, f.complexity) for f in found] == [("core/sample.py:over", 17)]


def test_methods_and_closures_are_counted_by_their_own_names() -> None:
    method = "class Box:\n" + branchy("method", 16, indent="    ")
    closure = "def outer():\n" + branchy("inner", 16, indent="    ") + "    return inner\n"
    found = check_complexity.check_source("core/sample.py", method + closure, 15)
    assert {f.where for f in found} == {"core/sample.py:Box.method", "core/sample.py:outer.inner"}


def test_boolean_operators_count(tmp_path: Path) -> None:
    source = "def f(a, b, c, d):\n    return " + " and ".join(f"x{i}" for i in range(16)) + "\n"
    assert check_complexity.check_source("core/sample.py", source, 15)


def write_project(tmp_path: Path, allowed: str = "") -> Path:
    (tmp_path / "core" / "migrations").mkdir(parents=True)
    (tmp_path / "core" / "big.py").write_text(branchy("big", 16))
    (tmp_path / "core" / "small.py").write_text(branchy("small", 3))
    (tmp_path / "core" / "migrations" / "0001_initial.py").write_text(branchy("migrate", 30))
    (tmp_path / "pyproject.toml").write_text(
        textwrap.dedent("""\
            [tool.check_complexity]
            packages = ["core"]
            limit = 15
            """)
        + allowed
    )
    return tmp_path


def test_over_the_limit_fails_and_migrations_are_left_out(tmp_path: Path, capsys: object) -> None:
    root = write_project(tmp_path)
    assert check_complexity.main([str(root)]) == 1
    config, problems = check_complexity.load_config(root / "pyproject.toml")
    failures, stale = check_complexity.run(root, config)
    assert [f.where for f in failures] == ["core/big.py:big"]
    assert (problems, stale) == ([], [])


def test_an_allowed_function_with_its_reason_passes(tmp_path: Path) -> None:
    root = write_project(tmp_path, '\n[[tool.check_complexity.allowed]]\nwhere = "core/big.py:big"\nreason = "why"\n')
    assert check_complexity.main([str(root)]) == 0


def test_an_entry_without_a_reason_fails(tmp_path: Path) -> None:
    root = write_project(tmp_path, '\n[[tool.check_complexity.allowed]]\nwhere = "core/big.py:big"\nreason = " "\n')
    _config, problems = check_complexity.load_config(root / "pyproject.toml")
    assert problems == ["core/big.py:big: allow-list entry without a reason"]
    assert check_complexity.main([str(root)]) == 1


def test_a_stale_entry_fails(tmp_path: Path) -> None:
    allowed = (
        '\n[[tool.check_complexity.allowed]]\nwhere = "core/big.py:big"\nreason = "why"\n'
        '\n[[tool.check_complexity.allowed]]\nwhere = "core/small.py:small"\nreason = "split since"\n'
    )
    root = write_project(tmp_path, allowed)
    config, _problems = check_complexity.load_config(root / "pyproject.toml")
    assert check_complexity.run(root, config) == ([], ["core/small.py:small"])
    assert check_complexity.main([str(root)]) == 1


def test_this_repository_passes() -> None:
    assert check_complexity.main([str(ROOT)]) == 0
