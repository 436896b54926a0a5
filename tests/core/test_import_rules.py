"""The import gate bites: scripts/check_imports.py and import-linter's contracts
fail on tiny package trees with an import inside a function, an import cycle
and a layer break, each with a message naming it, and pass on this repository
(its allow-lists applied)."""

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _load_checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_imports", ROOT / "scripts" / "check_imports.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_imports = _load_checker()


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Write ``{"pkg/mod.py": source}`` under ``root`` (each package gets an __init__.py)."""
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(root).parents:
            if parent != Path(".") and not (root / parent / "__init__.py").exists():
                (root / parent / "__init__.py").write_text("", encoding="utf-8")
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return root


def write_config(root: Path, body: str) -> Path:
    path = root / "pyproject.toml"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def run_checker(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = check_imports.main(["--root", str(root)])
    return status, capsys.readouterr().out


def run_lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603  (our own venv's lint-imports on a file we wrote)
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", "--config", str(root / "pyproject.toml")],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": str(LINT_IMPORTS.parent), "PYTHONPATH": str(root)},
    )


# --- scripts/check_imports.py ------------------------------------------------------


def test_an_import_inside_a_function_fails_naming_the_place(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tree(
        tmp_path,
        {
            "app/a.py": """
                def f() -> int:
                    from app.b import VALUE

                    return VALUE
            """,
            "app/b.py": "VALUE = 1\n",
        },
    )
    write_config(tmp_path, '[tool.check_imports]\npackages = ["app"]\n')
    status, out = run_checker(tmp_path, capsys)
    assert status == 1
    assert "app/a.py:3: `from app.b import VALUE` inside app.a.f(): move it to the module top" in out
    assert "check_imports: 1 problem(s)" in out


def test_ready_and_type_checking_imports_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tree(
        tmp_path,
        {
            "app/apps.py": """
                class AppConfig:
                    def ready(self) -> None:
                        from app import signals  # noqa: F401
            """,
            "app/signals.py": """
                from typing import TYPE_CHECKING

                if TYPE_CHECKING:
                    from app.apps import AppConfig


                def connect(config: "AppConfig") -> None:
                    if TYPE_CHECKING:
                        from app.apps import AppConfig  # noqa: F811
            """,
        },
    )
    write_config(tmp_path, '[tool.check_imports]\npackages = ["app"]\n')
    status, out = run_checker(tmp_path, capsys)
    assert (status, out.strip()) == (0, "check_imports: app clean")


def test_the_allow_list_takes_an_entry_with_its_reason_and_flags_stale_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tree(
        tmp_path,
        {
            "app/client.py": """
                def fast() -> object:
                    import json

                    return json
            """,
        },
    )
    allowed = '[[tool.check_imports.allowed]]\nwhere = "app.client.fast"\nimports = "json"\nreason = "optional"\n'
    write_config(tmp_path, '[tool.check_imports]\npackages = ["app"]\n' + allowed)
    assert run_checker(tmp_path, capsys)[0] == 0

    stale = '[[tool.check_imports.temporary]]\nwhere = "app.client.gone"\nimports = "os"\nreason = "was there"\n'
    write_config(tmp_path, '[tool.check_imports]\npackages = ["app"]\n' + allowed + stale)
    status, out = run_checker(tmp_path, capsys)
    assert status == 1
    assert "[tool.check_imports] temporary: app.client.gone no longer imports os inside a function" in out

    unexplained = '[[tool.check_imports.allowed]]\nwhere = "app.client.fast"\nimports = "json"\nreason = " "\n'
    write_config(tmp_path, '[tool.check_imports]\npackages = ["app"]\n' + unexplained)
    with pytest.raises(ValueError, match=r"app.client.fast needs a reason"):
        run_checker(tmp_path, capsys)


def test_a_module_level_cycle_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tree(
        tmp_path,
        {
            "app/a.py": "from app import b\n",
            "app/b.py": "from . import c\n",
            "app/c.py": "import app.a\n",
            "app/d.py": "from app import a\n",  # imports into the cycle, is not part of it
            # A package and its own module: a cycle import-linter's siblings contract cannot see.
            "app/sub/__init__.py": "from app.sub.x import X\n",
            "app/sub/x.py": "from app.sub import helper\n\nX = helper\n",
        },
    )
    write_config(tmp_path, '[tool.check_imports]\npackages = ["app"]\n')
    status, out = run_checker(tmp_path, capsys)
    assert status == 1
    assert "import cycle among module-level imports: app.a <-> app.b <-> app.c" in out
    assert "import cycle among module-level imports: app.sub <-> app.sub.x" in out
    assert "app.d" not in out


def test_the_repository_passes_the_checker(capsys: pytest.CaptureFixture[str]) -> None:
    status, out = run_checker(ROOT, capsys)
    assert (status, out.strip()) == (
        0,
        "check_imports: core, durability, audit, insight, accounts, webhooks, live, notices, messagecenter clean",
    )


# --- import-linter's contracts -----------------------------------------------------

CONTRACTS = """
    [tool.importlinter]
    root_packages = ["low", "high"]

    [[tool.importlinter.contracts]]
    id = "layers"
    name = "layers"
    type = "layers"
    layers = ["high", "low"]

    [[tool.importlinter.contracts]]
    id = "acyclic"
    name = "acyclic"
    type = "acyclic_siblings"
    ancestors = ["low", "high"]
"""


def test_lint_imports_fails_on_a_layer_break(tmp_path: Path) -> None:
    write_tree(tmp_path, {"low/base.py": "from high import top\n", "high/top.py": "from low import other\n"})
    write_tree(tmp_path, {"low/other.py": "VALUE = 1\n"})
    write_config(tmp_path, CONTRACTS)
    result = run_lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "low is not allowed to import high" in result.stdout
    assert "low.base -> high.top" in result.stdout


def test_lint_imports_fails_on_an_inner_import_that_breaks_a_layer(tmp_path: Path) -> None:
    # An import hidden in a function is an import all the same.
    write_tree(tmp_path, {"low/base.py": "def f() -> None:\n    from high import top  # noqa: F401\n"})
    write_tree(tmp_path, {"high/top.py": "VALUE = 1\n"})
    write_config(tmp_path, CONTRACTS)
    result = run_lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "low.base -> high.top" in result.stdout


def test_lint_imports_fails_on_a_cycle_between_siblings(tmp_path: Path) -> None:
    write_tree(
        tmp_path, {"high/a.py": "from high import b\n", "high/b.py": "def f() -> None:\n    from high import a\n"}
    )
    write_tree(tmp_path, {"low/base.py": "VALUE = 1\n"})
    write_config(tmp_path, CONTRACTS)
    result = run_lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "No cycles are allowed in high." in result.stdout


def test_lint_imports_passes_a_clean_tree(tmp_path: Path) -> None:
    write_tree(tmp_path, {"low/base.py": "VALUE = 1\n", "high/top.py": "from low.base import VALUE\n"})
    write_config(tmp_path, CONTRACTS)
    result = run_lint_imports(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 2 kept, 0 broken." in result.stdout


def test_the_repository_keeps_its_contracts() -> None:
    # compat/ holds the notifications drop-in as a top-level package (settings
    # put it on sys.path; lint-imports is given it as make lint gives it).
    env = {**os.environ, "PYTHONPATH": str(ROOT / "compat")}
    result = subprocess.run(  # noqa: S603  (our own venv's lint-imports on the repository's config)
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=ROOT, capture_output=True, text=True, check=False, env=env
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Layers point one way: core < apps < notices < messagecenter < notifications KEPT" in result.stdout
    assert "Contracts: 2 kept, 0 broken." in result.stdout
