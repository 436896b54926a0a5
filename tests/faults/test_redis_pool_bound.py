"""Each process's Redis connections are bounded (core.breaker.BoundedConnectionPool).

Under the README's ASGI command every concurrent request runs its sync code
in a thread of its own; with redis-py's plain pool each busy thread opened a
connection of its own, so a burst of clients became a burst of Redis
connections. Here a real uvicorn (two workers, a pool of ``POOL_MAX`` each)
serves a burst of concurrent API requests against a private redis-server,
and ``CLIENT LIST`` on that server, sampled all along, never shows more of
the workers' connections than the pools allow. A request that finds no connection free in time answers 503
with the envelope, never 500.
"""

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.http import HttpResponse
from django.test import RequestFactory

from core.breaker import BoundedConnectionPool, RedisPoolExhausted, SharedPoolFactory
from core.middleware import DatabaseUnavailableMiddleware
from core.views import envelope_exception_handler, server_error
from messagecenter.services import messages as message_services
from tests.core.test_asgi_connections import uvicorn_server
from tests.faults.conftest import RedisServer
from tests.fixtures.clients import token_for

WORKERS = 2
POOL_MAX = 3
# Each process holds its pool and nothing beside it.
PER_PROCESS = POOL_MAX
REQUESTS = 400
CONCURRENCY = 60


def test_the_pool_waits_then_refuses_with_its_own_error(redis_server: RedisServer) -> None:
    looker = redis_server.client()
    own = int(looker.client_id())
    pool = BoundedConnectionPool(host="127.0.0.1", port=redis_server.port, max_connections=2, timeout=0.2)
    held = [pool.get_connection(), pool.get_connection()]
    started = time.monotonic()
    with pytest.raises(RedisPoolExhausted):
        pool.get_connection()
    assert time.monotonic() - started >= 0.19
    # Given back, a connection is handed out again (no new socket).
    pool.release(held.pop())
    again = pool.get_connection()
    assert again.is_connected
    opened_since = [c for c in looker.client_list() if int(c["id"]) > own]
    assert len(opened_since) == 2  # the pool's two, no more
    pool.release(again)
    pool.release(held.pop())
    pool.disconnect()


def test_threads_that_connect_at_once_share_one_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """django-redis fills its pool registry without a lock: threads that ask at
    once would each build a pool of their own, each up to the bound."""
    factory = SharedPoolFactory({"CONNECTION_POOL_CLASS": "core.breaker.BoundedConnectionPool"})
    url = "redis://127.0.0.1:1/0"
    monkeypatch.setattr(SharedPoolFactory, "pools", {})
    real = SharedPoolFactory.get_connection_pool

    def slow(self: SharedPoolFactory, params: dict[str, Any]) -> Any:
        time.sleep(0.05)  # widens the window every thread would find empty
        return real(self, params)

    monkeypatch.setattr(SharedPoolFactory, "get_connection_pool", slow)
    start = threading.Barrier(8)
    pools: list[Any] = []

    def connect() -> None:
        start.wait()
        pools.append(factory.get_or_create_connection_pool({"url": url}))

    threads = [threading.Thread(target=connect) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(pools) == 8
    assert len({id(pool) for pool in pools}) == 1


@pytest.mark.django_db(transaction=True)
def test_an_exhausted_pool_answers_503_with_the_envelope() -> None:
    factory = RequestFactory()
    exhausted = RedisPoolExhausted("no Redis connection free within 1.0 s")

    api = envelope_exception_handler(exhausted, {})
    assert api is not None
    assert api.status_code == 503
    assert api.data["error"]["code"] == "service_unavailable"
    assert int(api["Retry-After"]) > 0

    middleware = DatabaseUnavailableMiddleware(lambda request: HttpResponse())
    page = middleware.process_exception(factory.get("/inbox/"), exhausted)
    assert page is not None
    assert page.status_code == 503
    assert page["Retry-After"]

    try:
        raise exhausted
    except RedisPoolExhausted:
        # Outside a view (a middleware): handler500 gives the same answer.
        answer = server_error(factory.get("/api/v1/inbox/"))
    assert answer.status_code == 503
    assert b'"service_unavailable"' in answer.content
    # Any other Redis connection error is not an overload: handler500 keeps its 500.
    try:
        raise ConnectionError("something else")
    except ConnectionError:
        assert server_error(factory.get("/api/v1/inbox/")).status_code == 500


def _children(parent: int) -> set[int]:
    """The processes whose parent is ``parent`` (uvicorn's workers)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # "pid (comm) state ppid ...": comm may hold spaces, so split after it.
            if int(stat.rpartition(")")[2].split()[1]) == parent:
                found.add(int(entry.name))
    return found


def _socket_inodes(pids: set[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue  # the process is gone
    return inodes


def _client_ports(server_port: int, inodes: set[str]) -> set[int]:
    """Local ports of the ESTABLISHED TCP connections to ``server_port`` whose
    client side is one of ``inodes`` (from /proc/net/tcp)."""
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
        if state == "01" and int(remote.rsplit(":", 1)[1], 16) == server_port and inode in inodes:
            ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


class ClientCounter:
    """Samples ``CLIENT LIST`` of the private server, counting the connections
    of the uvicorn workers only: the client side of each (its local port) is
    a socket open in one of the workers. (The test process talks to the same
    server, and a connection a client has just closed can stay listed until
    the server gets to it.)"""

    def __init__(self, server: RedisServer, uvicorn_pid: int) -> None:
        self.port = server.port
        self.uvicorn_pid = uvicorn_pid
        self.client = server.client()
        self.peak = 0
        self.at_peak: list[dict[str, Any]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def count(self) -> int:
        workers = _children(self.uvicorn_pid)
        listed = self.client.client_list()
        ports = _client_ports(self.port, _socket_inodes(workers))
        clients = [c for c in listed if int(c["addr"].rsplit(":", 1)[1]) in ports]
        if len(clients) > self.peak:
            self.peak, self.at_peak = len(clients), clients
        return len(clients)

    def _run(self) -> None:
        while not self.stop.is_set():
            self.count()
            time.sleep(0.01)

    def __enter__(self) -> "ClientCounter":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)


async def _burst(url: str, tokens: list[str]) -> list[tuple[int, Any]]:
    limits = httpx.Limits(max_connections=CONCURRENCY + 10, max_keepalive_connections=CONCURRENCY)
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(client: httpx.AsyncClient, index: int) -> tuple[int, Any]:
        path = ("/api/v1/inbox/", "/api/v1/inbox/counts/", "/api/v1/inbox/?unread=true")[index % 3]
        async with gate:
            response = await client.get(path, headers={"Authorization": f"Token {tokens[index % len(tokens)]}"})
        body = response.json() if response.headers.get("content-type", "").startswith("application/json") else None
        return response.status_code, body

    async with httpx.AsyncClient(base_url=url, timeout=60.0, limits=limits) as client:
        # Each user's first inbox read fills their cached language choice (one SQL
        # query under a fill lock, once per user); the burst is of warm readers.
        for token in tokens:
            warm = await client.get("/api/v1/inbox/?limit=1", headers={"Authorization": f"Token {token}"})
            assert warm.status_code == 200, warm.text
        return await asyncio.gather(*(one(client, index) for index in range(REQUESTS)))


@pytest.mark.redis_server
@pytest.mark.postgres
@pytest.mark.not_on_cluster(reason="the bound is the single-Redis pool's; a cluster client has a pool per node")
@pytest.mark.django_db(transaction=True)
def test_uvicorn_under_a_burst_stays_within_the_redis_pool(
    redis_server: RedisServer, tmp_path: Path, operator: Any
) -> None:
    users = [get_user_model().objects.create_user(username=f"burst-{i}", password="pw-burst-1") for i in range(20)]
    tokens = [token_for(user) for user in users]
    message_services.message_send(
        sender=operator,
        category="system",
        title="for the burst",
        body_html="<p>hi</p>",
        user_ids=[int(user.pk) for user in users],
    )
    running = uvicorn_server(
        log=tmp_path / "uvicorn.log",
        application_name="mc-redis-pool-test",
        extra_env={
            "MESSAGECENTER_TEST_CACHE_URL": redis_server.url,
            "REDIS_POOL_MAX_CONNECTIONS": str(POOL_MAX),
            "REDIS_POOL_TIMEOUT": "5",
        },
    )
    try:
        running.wait_ready()
        counter = ClientCounter(redis_server, running.process.pid)
        assert len(_children(running.process.pid)) >= WORKERS
        with counter:
            answers = asyncio.run(_burst(running.url, tokens))
            time.sleep(0.2)  # a few samples more: the workers still hold what the burst opened
    finally:
        running.stop()

    statuses = [status for status, _ in answers]
    assert set(statuses) <= {200, 503}, sorted(set(statuses))
    for status, body in answers:
        if status == 503:
            assert body["error"]["code"] == "service_unavailable"
    # The burst went through Redis (tokens, inbox pages and counts), most of it served.
    assert statuses.count(200) >= REQUESTS * 0.9, statuses.count(503)
    assert counter.peak > WORKERS, counter.peak
    assert counter.peak <= WORKERS * PER_PROCESS, [(c["id"], c["cmd"], c["age"]) for c in counter.at_peak]
