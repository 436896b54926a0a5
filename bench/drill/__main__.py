"""``python -m bench.drill``: start the stack, seed, load, inject the faults, print
the table and write bench/DRILLS.md. Every process started here is stopped by
its PID on the way out, also on Ctrl-C, SIGTERM or an error."""

import argparse
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit

import psycopg

from bench.drill import stack
from bench.drill.load import call, wait_until

# A name of its own so that two drills on one PostgreSQL do not drop each other's.
DATABASE = os.environ.get("MESSAGECENTER_DRILL_DATABASE", "messagecenter_drill")
FINDINGS = "## Findings"
PG = {"host": "127.0.0.1", "port": 5432, "user": "postgres"}
POSTGRES_FAULT = "PostgreSQL down"
CLUSTER_FAULT = "Redis Cluster master failover"
SERVERS = {
    "gunicorn": "gunicorn (2 gthread workers, 4 threads each)",
    "uvicorn": "uvicorn (the README's ASGI command, 2 workers)",
}


def _interrupted(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _recreate_database() -> None:
    """A database of the drill's own, empty at every run (never another one)."""
    with psycopg.connect(dbname="postgres", autocommit=True, **PG) as conn:  # type: ignore[arg-type]
        conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{DATABASE}"')


def _without_vhost(url: str) -> str:
    """``amqp://user:pass@host:port/vhost`` -> ``amqp://user:pass@host:port``."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _machine(redis: stack.RedisServer) -> str:
    with psycopg.connect(dbname="postgres", **PG) as conn:  # type: ignore[arg-type]
        row = conn.execute("SHOW server_version").fetchone()
    pg = row[0] if row else "?"
    version = redis.client().info("server")["redis_version"]
    return f"{platform.node()} · {os.cpu_count()} cores · Python {platform.python_version()} · PostgreSQL {pg} · Redis {version}"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.drill")
    parser.add_argument("--quick", action="store_true", help="a 15 s Redis outage and a 5 s freeze")
    parser.add_argument("--outage-seconds", type=float, default=None, help="Redis down this long (default 120)")
    parser.add_argument("--only", action="append", default=[], help="run only faults whose name contains this")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/DRILLS.md")
    parser.add_argument(
        "--server",
        choices=("gunicorn", "uvicorn"),
        default="gunicorn",
        help="the web server: gunicorn (WSGI) or the README's uvicorn command (ASGI)",
    )
    parser.add_argument(
        "--broker",
        choices=("redis", "rabbitmq"),
        default=None,
        help="Celery's broker: the private redis-server (db 1), or a virtual host of the drill's own on the "
        "machine's RabbitMQ (MESSAGECENTER_DRILL_RABBITMQ, default amqp://guest:guest@127.0.0.1:5672); "
        "default: rabbitmq when CELERY_BROKER_URL is an amqp:// URL (its host and credentials), else redis",
    )
    parser.add_argument(
        "--output",
        default="bench/DRILLS.md",
        help="where the report goes (its findings section is kept), relative to the repository",
    )
    args = parser.parse_args()
    outage = args.outage_seconds if args.outage_seconds is not None else (15.0 if args.quick else 120.0)
    given_broker = os.environ.get("CELERY_BROKER_URL", "")
    amqp_given = given_broker.startswith(("amqp://", "amqps://", "pyamqp://"))
    broker = args.broker or ("rabbitmq" if amqp_given else "redis")
    rabbit_base = os.environ.get("MESSAGECENTER_DRILL_RABBITMQ") or (
        _without_vhost(given_broker) if amqp_given else "amqp://guest:guest@127.0.0.1:5672"
    )

    # The PostgreSQL fault needs a PostgreSQL of the drill's own: then the whole
    # stack runs on it. Otherwise the machine's, with a database of the drill's own.
    private_pg = not args.only or any(part.lower() in POSTGRES_FAULT.lower() for part in args.only)
    with_cluster = not args.only or any(part.lower() in CLUSTER_FAULT.lower() for part in args.only)
    # SIGINT too: a shell without job control starts background jobs with it ignored.
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGINT, _interrupted)
    workdir = Path(tempfile.mkdtemp(prefix="mc-drill-"))
    processes: list[stack.Process] = []
    postgres: stack.PrivatePostgres | None = None
    rabbit: stack.RabbitBroker | None = None
    started = time.monotonic()
    try:
        if broker == "rabbitmq":
            rabbit = stack.RabbitBroker(rabbit_base, tag=workdir.name.removeprefix("mc-drill-").lower())
            rabbit.start()
        if private_pg:
            postgres = stack.PrivatePostgres(port=stack.free_port(6590), workdir=workdir)
            postgres.init()
            postgres.start()
            PG["port"] = postgres.port
        redis = stack.RedisServer(port=stack.free_port(6490), workdir=workdir)
        processes.append(redis)
        redis.start()
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "MESSAGECENTER_", "REDIS_"))},
            "DJANGO_SETTINGS_MODULE": "config.settings.drill",
            "DATABASE_URL": f"postgres://postgres@127.0.0.1:{PG['port']}/{DATABASE}",
            "REDIS_URL": redis.url(0),
            "CELERY_BROKER_URL": redis.url(1),
            "PYTHONUNBUFFERED": "1",
            **(rabbit.env() if rabbit is not None else {}),
        }
        env.pop("DJANGO_SETTINGS_MODULE_OVERRIDE", None)
        # This process seeds and checks; it is not part of the stack, so it
        # does not heal (the stack's processes do).
        os.environ.update(env)
        os.environ["MESSAGECENTER_SELF_HEALING"] = "false"
        _recreate_database()

        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)

        from bench.drill.runner import Drill, Row, table

        port = stack.free_port(8790)
        base = f"http://127.0.0.1:{port}"
        serve = stack.uvicorn if args.server == "uvicorn" else stack.gunicorn

        def app_processes(env: dict[str, str], tag: str) -> list[stack.Process]:
            return [
                serve(port=port, env=env, log=workdir / f"{args.server}{tag}.log"),
                stack.celery_worker(env=env, log=workdir / f"worker{tag}.log", name=f"drill{tag or 1}"),
                stack.celery_beat(env=env, log=workdir / f"beat{tag}.log", schedule=workdir / f"beat-schedule{tag}"),
            ]

        def start_app(started: list[stack.Process]) -> None:
            for process in started:
                processes.append(process)
                process.start()
            ready = wait_until(
                lambda: call(base, None, "GET", "/healthz")[0] == 200 and drill.serving_from_redis(), timeout=180
            )
            if ready is None:
                raise RuntimeError(f"the stack did not become ready; logs in {workdir}")

        app = app_processes(env, "")
        drill = Drill(base=base, redis=redis, worker=app[1], workdir=workdir, postgres=postgres, rabbit=rabbit)
        drill.app = app
        drill.seed()
        start_app(app)
        print(f"stack up: {base}, redis-server :{redis.port} (pid {redis.pid}), logs in {workdir}", flush=True)
        machine = _machine(redis)
        rows = drill.run(quick=args.quick, outage=outage, only=args.only)
        if with_cluster:
            # The same stack moved onto a Redis Cluster (the read model only:
            # the broker stays on the single redis-server, as Celery needs).
            for process in app:
                process.stop()
            try:
                cluster = stack.PrivateCluster(workdir=workdir, start_port=stack.free_port(7190))
                processes.extend(cluster.nodes)
                cluster.start()
                print(f"Redis Cluster up on {[node.port for node in cluster.nodes]}", flush=True)
                app = app_processes({**env, "MESSAGECENTER_REDIS_CLUSTER_URL": cluster.url()}, "-cluster")
                drill.worker = app[1]
                drill.app = app
                start_app(app)
                rows.append(drill.cluster_failover(cluster))
            except (RuntimeError, OSError) as exc:
                # The rows above stay reported; this one says why it has no figures.
                rows.append(Row(CLUSTER_FAULT, not_run=f"failed to run: {exc}"))
        else:
            rows.append(Row(CLUSTER_FAULT, not_run="not selected (--only)"))
    finally:
        for process in reversed(processes):
            process.stop()
        if postgres is not None:
            postgres.stop()
        if rabbit is not None:
            rabbit.stop()
    elapsed = time.monotonic() - started
    given = " ".join(arg for arg in sys.argv[1:] if arg != "--no-write")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=stack.ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    command = "make drill" + (f" DRILL_ARGS='{given}'" if given else "")
    report = "\n".join(
        [
            "# Fault drill",
            "",
            f"- date: {datetime.now(UTC).isoformat(timespec='seconds')}",
            f"- machine: {machine}",
            f"- commit: {commit or '?'}",
            f"- mode: {'quick' if args.quick else 'full'}, Redis outage {outage:.0f} s, {elapsed:.0f} s in all",
            f"- command: `{command}`",
            f"- stack: {SERVERS[args.server]}, Celery worker (prefork, 2) and beat, a private "
            + (
                "redis-server (read model on db 0), the broker RabbitMQ (the machine's, a virtual host of the "
                "drill's own, quorum queues), PostgreSQL database "
                if rabbit is not None
                else "redis-server (read model on db 0, broker on db 1), PostgreSQL database "
            )
            + f"`{DATABASE}` on {'a private PostgreSQL cluster' if private_pg else 'the machine PostgreSQL'}; "
            "for the last row the read model moves to a private six-node Redis Cluster (three masters, three "
            "replicas, cluster-node-timeout 2 s; the broker stays where it was) and the stack is "
            "restarted on it; load: 8 readers (inbox page, counts, marks) and an operator publishing every 2 s",
            f"- machine load (1, 5, 15 min) at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
            "(2 cores shared with other jobs: the timings are noisy)",
            "- restore: seconds from the end of the fault (FLUSHALL, the restart, SIGCONT, the kill) until "
            "/healthz says redis ok and every reader's whole inbox over the API lists every acknowledged message "
            "once, shows every acknowledged mark and counts what it lists as unread; lost: acknowledged marks or "
            "messages missing from the API or from what PostgreSQL alone gives (the fallback), checked after the "
            "restore; items the two list differently are noted under the table",
            "",
            table(rows),
            "",
        ]
    )
    print()
    print(report)
    if not args.no_write:
        path = stack.ROOT / args.output
        # The findings below the table are written by people: a new run keeps them.
        kept = path.read_text(encoding="utf-8").partition(FINDINGS)[2] if path.exists() else ""
        path.write_text(report + (f"\n{FINDINGS}{kept}" if kept else ""), encoding="utf-8")
    if all(r.not_run or r.verdict() == "met" for r in rows):
        shutil.rmtree(workdir, ignore_errors=True)
        return 0
    print(f"targets missed: the processes' logs are kept in {workdir}")
    return 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted: every process the drill started is stopped", file=sys.stderr)
        sys.exit(130)
