"""Under a real ASGI server no request or stream keeps a PostgreSQL connection.

The README's command (``uvicorn config.asgi:application --workers N``) runs
against the run's test database (config/settings/test_server.py) with a small
pool per worker. Django runs each ASGI request's sync code in a thread of
its own; with persistent connections each of those threads opened and kept
one, until PostgreSQL refused new clients. Here:

- many event streams stay open at once, more than every worker's pool holds
  together: had a stream kept the connection its sign-in used, the pools
  would be drained and the requests below would wait for one and fail;
- meanwhile hundreds of concurrent requests that need SQL (token sign-ins,
  token lookups) and read-model requests all answer 200;
- ``pg_stat_activity`` never shows more of the server's connections than
  workers x pool size, none of them busy once the answers are in, and they
  go back to the pool's minimum once the burst is over.
"""

import asyncio
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client

from tests.fixtures.clients import token_for
from tests.served import ServedProcess, free_port, server_env, serving

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.not_on_cluster(reason="event streams are off on Redis Cluster by design (pages poll)"),
    pytest.mark.django_db(transaction=True),
]

WORKERS = 2
POOL_MIN = 1
POOL_MAX = 3
STREAMS = 24  # four times what the pools of both workers hold together
REQUESTS = 300
CONCURRENCY = 40


def uvicorn_server(*, log: Path, application_name: str, extra_env: dict[str, str] | None = None) -> ServedProcess:
    """``uvicorn config.asgi:application --workers N`` on a spare port."""
    port = free_port()
    env = server_env(
        application_name,
        {
            # Streams outlive the test's load; the client closes them.
            "MESSAGECENTER_LIVE_STREAM_SECONDS": "60",
            "DATABASE_POOL_MIN_SIZE": str(POOL_MIN),
            "DATABASE_POOL_MAX_SIZE": str(POOL_MAX),
            # A drained pool shows up as 503s within the test's time, not as a hang.
            "DATABASE_POOL_TIMEOUT": "3",
            "DATABASE_POOL_MAX_IDLE": "1",
            **(extra_env or {}),
        },
    )
    command = [sys.executable, "-m", "uvicorn", "config.asgi:application", "--workers", str(WORKERS)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--no-access-log"]
    return ServedProcess("uvicorn", command, port=port, log=log, env=env)


@pytest.fixture
def application_name() -> str:
    return f"mc-asgi-test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def server(tmp_path: Path, application_name: str) -> Iterator[ServedProcess]:
    with serving(uvicorn_server(log=tmp_path / "uvicorn.log", application_name=application_name)) as running:
        yield running


def _dsn() -> str:
    db = settings.DATABASES["default"]
    parts = {"host": db.get("HOST") or "", "port": db.get("PORT") or "", "user": db.get("USER") or ""}
    parts |= {"password": db.get("PASSWORD") or "", "dbname": db["NAME"]}
    return " ".join(f"{key}='{value}'" for key, value in parts.items() if value)


class Watcher:
    """Samples the server's connections in ``pg_stat_activity`` (by application name)."""

    def __init__(self, application_name: str) -> None:
        self.application_name = application_name
        self.peak = 0
        self.conn = psycopg.connect(_dsn(), autocommit=True)

    def states(self) -> list[str]:
        rows = self.conn.execute(
            "SELECT state FROM pg_stat_activity WHERE application_name = %s AND datname = current_database()",
            [self.application_name],
        ).fetchall()
        self.peak = max(self.peak, len(rows))
        return [str(state) for (state,) in rows]

    async def sample(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.to_thread(self.states)
            await asyncio.sleep(0.02)


def _users(count: int) -> list[tuple[Any, str, str]]:
    """(user, token, session id) per user; the sessions are in the database only."""
    found = []
    for index in range(count):
        user = get_user_model().objects.create_user(username=f"asgi-{index}", password=f"pw-{index}-secret")
        browser = Client()
        browser.force_login(user)
        found.append((user, token_for(user), browser.cookies[settings.SESSION_COOKIE_NAME].value))
    # Cold caches: each stream's sign-in (session, user) and each token lookup reads PostgreSQL.
    cache.clear()
    return found


async def _open_stream(client: httpx.AsyncClient, session_id: str, opened: list[int]) -> None:
    cookies = {settings.SESSION_COOKIE_NAME: session_id}
    async with client.stream("GET", "/api/v1/inbox/stream/", cookies=cookies) as response:
        assert response.status_code == 200, await response.aread()
        async for chunk in response.aiter_bytes():
            if b"event: hello" in chunk:
                opened.append(1)
            await asyncio.sleep(3600)  # held open until the test cancels it


async def _request(client: httpx.AsyncClient, index: int, users: list[tuple[Any, str, str]]) -> int:
    user, token, _ = users[index % len(users)]
    if index % 3 == 0:
        response = await client.post(
            "/api/v1/auth/token/", json={"username": user.username, "password": f"pw-{index % len(users)}-secret"}
        )
    elif index % 3 == 1:
        response = await client.get("/api/v1/me/", headers={"Authorization": f"Token {token}"})
    else:
        response = await client.get("/api/v1/inbox/", headers={"Authorization": f"Token {token}"})
    return response.status_code


async def _load(server: ServedProcess, watcher: Watcher, users: list[tuple[Any, str, str]]) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=STREAMS + CONCURRENCY + 10, max_keepalive_connections=CONCURRENCY)
    stop = asyncio.Event()
    sampler = asyncio.create_task(watcher.sample(stop))
    async with httpx.AsyncClient(base_url=server.url, timeout=30.0, limits=limits) as client:
        opened: list[int] = []
        streams = [asyncio.create_task(_open_stream(client, sid, opened)) for _, _, sid in users[:STREAMS]]
        deadline = time.monotonic() + 20
        while len(opened) < STREAMS and time.monotonic() < deadline:
            for stream in streams:
                if stream.done():
                    stream.result()  # a failed stream fails the test with its reason
            await asyncio.sleep(0.05)
        # Each user's first inbox read fills their cached language choice (one
        # SQL query, once); the burst below is of warm readers, as the claim is.
        for _user, token, _sid in users:
            warm = await client.get("/api/v1/inbox/", headers={"Authorization": f"Token {token}"})
            assert warm.status_code == 200, warm.text
        gate = asyncio.Semaphore(CONCURRENCY)

        async def limited(index: int) -> int:
            async with gate:
                return await _request(client, index, users)

        statuses = await asyncio.gather(*(limited(index) for index in range(REQUESTS)))
        await asyncio.sleep(0.5)
        # Every answer is in and every stream is still open.
        states_with_streams_open = await asyncio.to_thread(watcher.states)
        still_open = sum(not stream.done() for stream in streams)
        for stream in streams:
            stream.cancel()
        await asyncio.gather(*streams, return_exceptions=True)
    stop.set()
    await sampler
    return {
        "opened": len(opened),
        "statuses": statuses,
        "states_with_streams_open": states_with_streams_open,
        "still_open": still_open,
    }


def test_asgi_server_holds_no_connection_after_answering(server: ServedProcess, application_name: str) -> None:
    users = _users(STREAMS)
    watcher = Watcher(application_name)
    try:
        result = asyncio.run(_load(server, watcher, users))

        assert result["opened"] == STREAMS
        assert result["still_open"] == STREAMS
        # More streams than pooled connections were open the whole time, yet
        # every request that needed SQL got a connection in time.
        assert sorted(set(result["statuses"])) == [200], sorted(set(result["statuses"]))
        assert len(result["statuses"]) == REQUESTS
        # Bounded by the pools, and no connection busy while only streams are open.
        assert 0 < watcher.peak <= WORKERS * POOL_MAX, watcher.peak
        assert len(result["states_with_streams_open"]) <= WORKERS * POOL_MAX
        assert set(result["states_with_streams_open"]) <= {"idle"}, result["states_with_streams_open"]

        # Back to the pools' minimum once the burst is over (one idle
        # connection closed per second and worker).
        deadline = time.monotonic() + 20
        while len(states := watcher.states()) > WORKERS * POOL_MIN and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(states) <= WORKERS * POOL_MIN, states
        assert set(states) <= {"idle"}, states
    finally:
        watcher.conn.close()
