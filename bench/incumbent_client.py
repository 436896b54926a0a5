"""Runs the incumbent (bench/incumbent/run.py) in its own interpreter and
hands its figures to the cases: one subprocess per bench run, cached."""

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "bench" / "incumbent" / "run.py"
VENV_PYTHON = ROOT / "bench" / ".venv-incumbent" / "bin" / "python"


@dataclass(frozen=True)
class Shapes:
    """Per-user data sizes, the same on both sides of every comparison."""

    page_items: int  # the user whose inbox first page is timed
    inbox_items: int  # inbox items of the user whose unread counts are timed ...
    announcements: int  # ... and their live announcements
    mark_items: int  # unread items marked read at once (mark-all-read)


FULL = Shapes(page_items=1_000, inbox_items=10_000, announcements=1_000, mark_items=10_000)
# --quick keeps the whole run under two minutes on 2 shared cores: smaller shapes, stated in every row.
QUICK = Shapes(page_items=1_000, inbox_items=2_000, announcements=200, mark_items=2_000)


def shapes(*, quick: bool) -> Shapes:
    return QUICK if quick else FULL


# Every result this process got, for the report's header.
ran: list[dict[str, Any]] = []


class IncumbentUnavailable(RuntimeError):
    pass


def _python() -> str:
    python = os.environ.get("BENCH_INCUMBENT_PYTHON") or str(VENV_PYTHON)
    if not Path(python).exists():
        raise IncumbentUnavailable(
            f"{python} is missing: `make bench` creates it from bench/requirements-incumbent.txt"
        )
    return python


@cache
def results(*, users: int, quick: bool) -> dict[str, Any]:
    """The incumbent's figures for ``users`` recipients (same PostgreSQL server)."""
    db = settings.DATABASES["default"]
    env = {
        **os.environ,
        "INCUMBENT_DB_HOST": str(db.get("HOST") or "127.0.0.1"),
        "INCUMBENT_DB_PORT": str(db.get("PORT") or 5432),
        "INCUMBENT_DB_USER": str(db.get("USER") or "postgres"),
        "INCUMBENT_DB_PASSWORD": str(db.get("PASSWORD") or ""),
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    size = shapes(quick=quick)
    args = [_python(), str(RUNNER), "--users", str(users), "--page-items", str(size.page_items)]
    args += ["--count-items", str(size.inbox_items + size.announcements), "--mark-items", str(size.mark_items)]
    args += ["--repeat", "200", "--mark-repeat", "5"] if quick else ["--repeat", "1000", "--mark-repeat", "10"]
    print(f"   incumbent: {' '.join(args[1:])}", flush=True)
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise IncumbentUnavailable(f"the incumbent runner failed (exit {done.returncode})")
    figures = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    ran.append(figures)
    return figures


def source(figures: dict[str, Any]) -> str:
    return f"{figures['package']} on Django {figures['django']}"
