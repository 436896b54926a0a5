"""Run the benchmarks: ``python -m bench [--quick] [--users N] [--only NAME]``.

Builds its own data on the local PostgreSQL and Redis (a database and Redis
db of its own), runs every case after a warm-up, prints a table (median, p99,
ratio to the baseline measured in the same run) and writes bench/RESULTS.md.
"""

import argparse
import gc
import os
import platform
import sys
import time
from datetime import UTC, datetime
from importlib import import_module
from pathlib import Path
from typing import Any

CASES = (
    "bench.cases.broadcast",
    "bench.cases.announcements",
    "bench.cases.announcement_scale",
    "bench.cases.inbox",
    "bench.cases.groups",
    "bench.cases.counts",
    "bench.cases.notifications",
    "bench.cases.cache",
    "bench.cases.search",
    "bench.cases.user_ids",
    "bench.cases.http",
    "bench.cases.bulletins",
    "bench.cases.memory",
    "bench.cases.growth",
    "bench.cases.sse",
    "bench.cases.channels",
    "bench.cases.items",
    "bench.cases.fill",
    "bench.cases.marks",
)
ROOT = Path(__file__).resolve().parent.parent


def _ensure_database() -> None:
    import psycopg
    from django.conf import settings

    db = settings.DATABASES["default"]
    params: dict[str, Any] = {
        "host": db.get("HOST") or "127.0.0.1",
        "port": db.get("PORT") or 5432,
        "user": db.get("USER") or "postgres",
    }
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{db["NAME"]}"')


def _machine() -> str:
    import django
    import redis

    from core.redis import get_redis

    server = get_redis().info("server")
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        pg = cursor.fetchone()[0]
    return (
        f"{platform.node()} · {os.cpu_count()} cores · Python {platform.python_version()} · Django {django.__version__}"
        f" · PostgreSQL {pg} · Redis {server['redis_version']} · redis-py {redis.__version__}"
    )


def _tools() -> list[str]:
    """Where the baselines' figures come from, for the report."""
    import subprocess

    from bench import incumbent_client

    lines = []
    for figures in incumbent_client.ran:
        lines.append(
            f"- incumbent: {figures['package']} on Django {figures['django']} (Python {figures['python']}), in its "
            f"own virtual environment (bench/.venv-incumbent from bench/requirements-incumbent.txt) and database "
            f"`{figures['database']}` on the same PostgreSQL; notify.send measured to "
            f"{figures['broadcast']['recipients']:,} users"
        )
    try:
        import gunicorn

        wrk = subprocess.run(["wrk", "-v"], capture_output=True, text=True, check=False)
        version = (wrk.stdout or wrk.stderr).split("\n")[0].split(" [")[0]
        lines.append(f"- HTTP: gunicorn {gunicorn.__version__} (sync workers), {version}, on loopback")
        import uvicorn

        lines.append(f"- ASGI: uvicorn {uvicorn.__version__} (`python -m uvicorn config.asgi:application --workers 2`)")
    except (ImportError, OSError):
        pass
    return lines


# Sections of bench/RESULTS.md that a run keeps as they are: figures of code
# that no longer exists, which no later run can measure again.
KEPT_SECTIONS = ("## Fast routes as they stood before their removal",)


def _kept_sections(previous: str) -> str:
    """The KEPT_SECTIONS of the previous results file, each up to the next section."""
    kept = []
    for title in KEPT_SECTIONS:
        start = previous.find(title)
        if start < 0:
            continue
        end = previous.find("\n## ", start + len(title))
        kept.append(previous[start : end if end >= 0 else len(previous)].rstrip() + "\n")
    return "".join(f"\n{section}" for section in kept)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--quick", action="store_true", help="smaller data and fewer repeats (under two minutes)")
    parser.add_argument("--users", type=int, default=None, help="users to create (default 100,000; quick 10,000)")
    parser.add_argument("--only", action="append", default=[], help="run only cases whose module name contains this")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/RESULTS.md")
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.bench")
    import django

    django.setup()
    _ensure_database()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    # As a server process does once the app is loaded (config/wsgi.py, asgi.py):
    # what it holds now is out of the collector's sight.
    gc.freeze()

    from bench.harness import GrowthRow, Row, growth_table, split_rows, table
    from core.redis import get_redis

    get_redis().flushdb()
    users = args.users or (10_000 if args.quick else 100_000)
    started = time.perf_counter()
    rows: list[Row] = []
    growth: list[GrowthRow] = []
    for name in CASES:
        if args.only and not any(part in name for part in args.only):
            continue
        module = import_module(name)
        # A server process holds its app, frozen, and little else; this one also
        # holds what the cases before left (about 190,000 objects by the first
        # read case of a full run), which every full collection walks: 56-73 ms
        # a pass there, 2-5 ms with them frozen. Each case pays for its own objects.
        gc.collect()
        gc.freeze()
        print(f"== {name} ({users:,} users)", flush=True)
        case_started = time.perf_counter()
        case_rows, case_growth = split_rows(module.run(users=users, quick=args.quick))
        if case_rows:
            print(table(case_rows), flush=True)
        if case_growth:
            print(growth_table(case_growth), flush=True)
        print(f"   ({time.perf_counter() - case_started:.0f} s)", flush=True)
        rows += case_rows
        growth += case_growth
    elapsed = time.perf_counter() - started
    from bench.incumbent_client import shapes

    size = shapes(quick=args.quick)

    report = "\n".join(
        [
            "# Benchmark results",
            "",
            f"- date: {datetime.now(UTC).isoformat(timespec='seconds')}",
            f"- machine: {_machine()}",
            f"- mode: {'quick' if args.quick else 'full'}, {users:,} users, {elapsed:.0f} s",
            f"- command: `make bench{' BENCH_ARGS=--quick' if args.quick else ''}`",
            f"- per-user shapes: inbox page {size.page_items:,} items; unread counts {size.inbox_items:,} inbox items "
            f"+ {size.announcements:,} announcements; mark-all-read {size.mark_items:,} unread",
            *_tools(),
            "",
            "Ratios are how many times better ours is than the baseline measured in the same run (below 1: the "
            "baseline is faster). The target column states the goal set for the measure and whether this run meets it.",
            "",
            table(rows),
            "",
            "## Cost-growth table",
            "",
            "How each cost grows with one dimension of the data: the cost at each size, the last size's over the "
            "first's, and the target it is held to. Cases add rows here by returning `bench.harness.GrowthRow`s.",
            "",
            growth_table(growth) if growth else "(no case of this run measures growth)",
            "",
        ]
    )
    print()
    print(report)
    if not args.no_write:
        results = ROOT / "bench" / "RESULTS.md"
        kept = _kept_sections(results.read_text(encoding="utf-8") if results.exists() else "")
        results.write_text(report + kept, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
