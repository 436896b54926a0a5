"""Many concurrent clients against the README's ASGI command, with PostgreSQL watched.

``python -m bench.asgi_load [--clients 2000] [--seconds 300] [--workers 4] [--streams 0.1]``

Serves the project with ``uvicorn config.asgi:application --workers N`` and
the bench settings (database ``messagecenter_bench``, Redis db 3), signs in
``--clients`` users with tokens and keeps every one of them connected for
the whole run: a share of them (``--streams``) hold the live event stream
open (reconnecting when the server ends it, as a browser does), the others
poll like an open inbox page: counts, the inbox list, who am I, and now and
then a fresh sign-in for a token (which reads and writes PostgreSQL), each
followed by a pause of ``--think`` seconds on average. Meanwhile
``pg_stat_activity`` is sampled for the database's connections. Prints
requests, errors, p50/p99 latency and the peak number of connections.

Not part of the test suite: it takes minutes and the whole machine.
"""

import argparse
import asyncio
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "bench-asgi-password"  # noqa: S105 - bench users on a loopback server


def _prepare(clients: int, streams: int) -> tuple[list[tuple[str, str]], list[str]]:
    """(username, token) per client and a session id per streaming client."""
    import django

    django.setup()
    from bench.__main__ import _ensure_database

    _ensure_database()
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password
    from django.core.management import call_command
    from django.test import Client

    from bench.data import ensure_users, issue_tokens
    from core.redis import get_redis

    call_command("migrate", verbosity=0)
    get_redis().flushdb()
    low, high = ensure_users(clients)
    crowd = get_user_model().objects.filter(pk__gte=low, pk__lte=high)
    crowd.update(password=make_password(PASSWORD))
    # Loaded after the new password: a session carries a hash of it.
    users = list(crowd.order_by("pk")[:clients])
    tokens = issue_tokens(users)
    sessions = []
    for user in users[:streams]:
        browser = Client()
        browser.force_login(user)
        sessions.append(browser.cookies["sessionid"].value)
    from django.db import connection

    # This process's own pool would count among the server's connections.
    connection.close()
    # The PostgreSQL backend's connection pool (Django 5.1+), not on django-stubs' base wrapper.
    connection.close_pool()  # type: ignore[attr-defined]
    return [(user.get_username(), tokens[user.pk]) for user in users], sessions


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(workers: int, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings.bench"}
    command = [sys.executable, "-m", "uvicorn", "config.asgi:application", "--workers", str(workers)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--no-access-log", "--backlog", "4096"]
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
    )


class Tally:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.statuses: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.streams_opened = 0
        self.stream_errors: Counter[str] = Counter()
        self.peak_connections = 0
        self.retries = 0
        self.samples: list[int] = []


async def _send(client: Any, roll: float, username: str, headers: dict[str, str], tally: Tally) -> Any:
    """One request; sent once more when the server closed the reused keep-alive
    connection before answering (uvicorn drops idle ones after 5 s), as
    browsers do. The retries are counted and reported."""
    for attempt in (1, 2):
        try:
            if roll < 0.05:
                return await client.post("/api/v1/auth/token/", json={"username": username, "password": PASSWORD})
            if roll < 0.55:
                return await client.get("/api/v1/inbox/counts/", headers=headers)
            if roll < 0.9:
                return await client.get("/api/v1/inbox/", headers=headers)
            return await client.get("/api/v1/me/", headers=headers)
        except httpx.RemoteProtocolError:
            if attempt == 2:
                raise
            tally.retries += 1
    raise AssertionError("unreachable")


async def _poller(client: Any, username: str, token: str, tally: Tally, stop: float, think: float) -> None:
    headers = {"Authorization": f"Token {token}"}
    await asyncio.sleep(random.uniform(0, think))  # spread the start
    while time.monotonic() < stop:
        roll = random.random()
        started = time.perf_counter()
        try:
            response = await _send(client, roll, username, headers, tally)
            tally.latencies.append(time.perf_counter() - started)
            tally.statuses[str(response.status_code)] += 1
            if response.status_code >= 400:
                tally.errors[f"{response.status_code} {response.text[:80]}"] += 1
        except Exception as exc:  # counted and reported, the client goes on
            tally.errors[type(exc).__name__] += 1
        await asyncio.sleep(min(random.expovariate(1 / think), max(0.0, stop - time.monotonic())))


async def _streamer(client: Any, session_id: str, tally: Tally, stop: float) -> None:
    await asyncio.sleep(random.uniform(0, 5))
    while time.monotonic() < stop:
        try:
            async with client.stream("GET", "/api/v1/inbox/stream/", cookies={"sessionid": session_id}) as response:
                if response.status_code != 200:
                    tally.stream_errors[str(response.status_code)] += 1
                    await asyncio.sleep(3)
                    continue
                tally.streams_opened += 1
                async for _chunk in response.aiter_bytes():
                    if time.monotonic() >= stop:
                        return
        except Exception as exc:  # counted and reported, the client reconnects
            if time.monotonic() < stop:
                tally.stream_errors[type(exc).__name__] += 1
        await asyncio.sleep(3)  # the stream's retry hint


async def _watch(dsn: str, database: str, tally: Tally, stop: float) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < stop + 5:
            row = await (
                await conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", [database]
                )
            ).fetchone()
            count = int(row[0]) if row else 0
            tally.samples.append(count)
            tally.peak_connections = max(tally.peak_connections, count)
            await asyncio.sleep(0.25)


async def _run(args: argparse.Namespace, base: str, users: list[tuple[str, str]], sessions: list[str]) -> Tally:
    tally = Tally()
    # A client drops an idle connection before uvicorn does (its keep-alive
    # timeout is 5 s): reusing one the server is closing fails the request.
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None, keepalive_expiry=4)
    timeout = httpx.Timeout(60.0, connect=30.0)
    dsn = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
    # One client (one connection pool) per simulated user: 2,000 users, 2,000
    # connections. One TLS context for all (plain HTTP, but httpx builds one
    # per client otherwise, loading the CA bundle each time: over a minute).
    context = ssl.create_default_context()
    clients = [httpx.AsyncClient(base_url=base, limits=limits, timeout=timeout, verify=context) for _ in users]
    stop = time.monotonic() + args.seconds
    try:
        tasks = [asyncio.create_task(_watch(dsn, "messagecenter_bench", tally, stop))]
        for index, (username, token) in enumerate(users):
            if index < len(sessions):
                tasks.append(asyncio.create_task(_streamer(clients[index], sessions[index], tally, stop)))
            else:
                tasks.append(asyncio.create_task(_poller(clients[index], username, token, tally, stop, args.think)))
        await asyncio.gather(*tasks)
    finally:
        await asyncio.gather(*(client.aclose() for client in clients), return_exceptions=True)
    return tally


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.asgi_load")
    parser.add_argument("--clients", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--streams", type=float, default=0.1, help="share of the clients holding the event stream")
    parser.add_argument("--think", type=float, default=10.0, help="mean pause between a client's requests (s)")
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.bench")
    streams = int(args.clients * args.streams)
    users, sessions = _prepare(args.clients, streams)
    port = _free_port()
    log = Path("/tmp") / f"bench-asgi-uvicorn-{port}.log"  # noqa: S108
    server = _serve(args.workers, port, log)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                httpx.get(f"{base}/api/v1/me/", timeout=1.0)
                break
            except httpx.TransportError:
                time.sleep(0.3)
        started = time.monotonic()
        tally = asyncio.run(_run(args, base, users, sessions))
        elapsed = time.monotonic() - started
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)
    requests = len(tally.latencies)
    print(f"uvicorn config.asgi:application --workers {args.workers} (bench settings), {elapsed:.0f} s")
    print(f"clients {len(users)} ({streams} holding the event stream, the rest polling every ~{args.think:g} s)")
    print(f"requests {requests} ({requests / elapsed:.0f}/s), statuses {dict(tally.statuses)}")
    print(
        f"errors {sum(tally.errors.values())} {dict(tally.errors.most_common(5))}, keep-alive retries {tally.retries}"
    )
    print(f"streams opened {tally.streams_opened}, stream errors {dict(tally.stream_errors)}")
    print(
        f"latency p50 {_quantile(tally.latencies, 0.5) * 1000:.1f} ms, p99 {_quantile(tally.latencies, 0.99) * 1000:.1f} ms"
    )
    print(f"PostgreSQL connections to messagecenter_bench: peak {tally.peak_connections}, last {tally.samples[-1:]}")
    print(f"server log: {log}")
    return 0 if not tally.errors and not tally.stream_errors else 1


if __name__ == "__main__":
    sys.exit(main())
