"""The event stream on its public path under two ASGI servers.

uvicorn and hypercorn each serve ``tests.core.live_app:application`` (Django's
own handler, and the lifespan protocol whose shutdown closes the process's
hub) on a spare port against the run's test database and Redis. Every byte
of a stream goes through Django's streaming response and the server's ASGI
``send``: a second server proves nothing depends on one server's insides.
Each server (and a gunicorn of sync workers, where the same view serves the
blocking stream, for the first scenario):

- opens a stream (token) and says hello with the user's version;
- delivers a broadcast and an event for the user alone (not another user's);
- sends heartbeats while nothing happens;
- answers a reconnect carrying ``Last-Event-ID`` with hello and the version
  the events missed meanwhile moved to (no replay: the page refetches);
- drops a client that stopped reading once its backlog is full, with a
  ``resync`` event at the end of what it gets, while the other streams go
  on hearing events;
- shuts down through the lifespan protocol, closing the hub.
"""

import asyncio
import json
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model

from core.redis import get_redis
from live import keys as live_keys
from live import transport as live
from tests.asgi_calls import sse_blocks
from tests.core.live_app import CLOSED
from tests.fixtures.clients import token_for
from tests.served import ServedProcess, free_port, server_env, serving

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.not_on_cluster(reason="event streams are off on Redis Cluster by design (pages poll)"),
    pytest.mark.django_db(transaction=True),
]

STREAM = "/api/v1/inbox/stream/"
APP = "tests.core.live_app:application"
HEARTBEAT_SECONDS = 0.5


def _command(kind: str, port: int) -> list[str]:
    if kind == "gunicorn":
        # Sync workers, one stream each: three hold the test's streams at once.
        return [
            *(sys.executable, "-m", "gunicorn", "tests.core.live_app:wsgi_application"),
            *("--bind", f"127.0.0.1:{port}", "--workers", "3", "--worker-class", "sync"),
        ]
    if kind == "uvicorn":
        return [
            *(sys.executable, "-m", "uvicorn", APP, "--host", "127.0.0.1", "--port", str(port)),
            *("--no-access-log", "--lifespan", "on", "--timeout-graceful-shutdown", "2"),
        ]
    return [sys.executable, "-m", "hypercorn", APP, "--bind", f"127.0.0.1:{port}", "--graceful-timeout", "2"]


def _served(kind: str, log: Path) -> ServedProcess:
    """One server process (one worker) serving the live test app."""
    port = free_port()
    env = server_env(
        f"mc-live-{kind}-test",
        {
            "MESSAGECENTER_LIVE_STREAM_SECONDS": "60",
            "MESSAGECENTER_LIVE_HEARTBEAT_SECONDS": str(HEARTBEAT_SECONDS),
            "DATABASE_POOL_MIN_SIZE": "1",
            "DATABASE_POOL_MAX_SIZE": "3",
        },
    )
    return ServedProcess(kind, _command(kind, port), port=port, log=log, env=env)


@pytest.fixture(params=["uvicorn", "hypercorn"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServedProcess]:
    with serving(_served(request.param, tmp_path / f"{request.param}.log")) as running:
        yield running


@pytest.fixture(params=["uvicorn", "hypercorn", "gunicorn"])
def any_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServedProcess]:
    """The ASGI servers and, for the blocking stream WSGI serves, a gunicorn."""
    with serving(_served(request.param, tmp_path / f"{request.param}.log")) as running:
        yield running


def _user(name: str) -> tuple[Any, str]:
    user = get_user_model().objects.create_user(username=name, password=f"{name}-pw-secret")
    return user, token_for(user)


class Reader:
    """One stream read by httpx: every block as (event, data), and the keepalives."""

    def __init__(self) -> None:
        self.blocks: list[tuple[str, Any]] = []
        self.heartbeats = 0
        self.status = 0

    def events(self, name: str) -> list[Any]:
        return [data for event, data in self.blocks if event == name]

    async def run(self, client: httpx.AsyncClient, token: str, headers: dict[str, str] | None = None) -> None:
        headers = {"Authorization": f"Token {token}", "Accept": "text/event-stream", **(headers or {})}
        async with client.stream("GET", STREAM, headers=headers) as response:
            self.status = response.status_code
            assert response.headers["content-type"] == "text/event-stream"
            async for event, data in sse_blocks(response):
                if event == "keepalive":
                    self.heartbeats += 1
                else:
                    self.blocks.append((event, data))


async def _until(check: Any, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def _publish(function: Any, **kwargs: Any) -> None:
    await asyncio.to_thread(function, **kwargs)


def test_a_stream_hears_broadcasts_its_own_events_heartbeats_and_resumes(any_server: ServedProcess) -> None:
    server = any_server
    me, my_token = _user("live-me")
    _, other_token = _user("live-other")

    async def scenario() -> None:
        mine, theirs = Reader(), Reader()
        async with httpx.AsyncClient(base_url=server.url, timeout=30.0) as client:
            tasks = [
                asyncio.create_task(mine.run(client, my_token)),
                asyncio.create_task(theirs.run(client, other_token)),
            ]
            await _until(lambda: mine.events("hello") and theirs.events("hello"), "both hellos")
            assert mine.status == 200
            assert mine.events("hello") == [{"v": 0}]

            await _publish(live.broadcast, scope=live.BROADCAST_EVERYONE, reason="pull", ref="m1")
            await _until(lambda: mine.events("inbox") and theirs.events("inbox"), "a broadcast on both streams")
            spread = live.BROADCAST_SPREAD_MS
            expected = {"reason": "pull", "scope": "everyone", "spread": spread, "ref": "m1"}
            assert mine.events("inbox") == theirs.events("inbox") == [expected]

            await _publish(live.inbox_changed, user_ids=[me.pk], reason="deliver")
            await _until(lambda: len(mine.events("inbox")) == 2, "my own event")
            assert mine.events("inbox")[1] == {"v": 1, "reason": "deliver"}

            beats = mine.heartbeats
            await _until(lambda: mine.heartbeats >= beats + 2, "two heartbeats on a quiet stream")
            assert len(theirs.events("inbox")) == 1  # never another user's event

            # Gone for a while: two changes happen meanwhile. The reconnect (as
            # EventSource makes it, with the last event's id) starts from the
            # version they moved to, and the page refetches what it shows.
            tasks[0].cancel()
            await asyncio.gather(tasks[0], return_exceptions=True)
            await _publish(live.inbox_changed, user_ids=[me.pk], reason="read")
            await _publish(live.inbox_changed, user_ids=[me.pk], reason="hide")
            again = Reader()
            tasks.append(asyncio.create_task(again.run(client, my_token, {"Last-Event-ID": "1"})))
            await _until(lambda: again.events("hello"), "hello after the reconnect")
            assert again.events("hello") == [{"v": 3}]
            await _publish(live.inbox_changed, user_ids=[me.pk], reason="seen")
            await _until(lambda: again.events("inbox"), "an event after the reconnect")
            assert again.events("inbox") == [{"v": 4, "reason": "seen"}]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(scenario())


async def _raw_stream(port: int, token: str) -> socket.socket:
    """A stream on a plain socket with a small receive buffer, read up to its hello."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    request = (
        f"GET {STREAM} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nAuthorization: Token {token}\r\n\r\n"
    )
    await loop.sock_sendall(sock, request.encode())
    received = b""
    while b"event: hello" not in received:
        data = await asyncio.wait_for(loop.sock_recv(sock, 65536), 15)
        assert data, received
        received += data
    assert received.startswith(b"HTTP/1.1 200"), received
    return sock


def test_a_client_that_stops_reading_is_dropped_and_never_holds_up_the_others(server: ServedProcess) -> None:
    slow_user, slow_token = _user("live-slow")
    _, token = _user("live-reader")
    # Events far larger than any socket buffer in between: the slow client's
    # stream soon waits on the server's send, and its backlog fills up.
    pad = "x" * 65536
    flood = 80

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        reader = Reader()
        async with httpx.AsyncClient(base_url=server.url, timeout=30.0) as client:
            task = asyncio.create_task(reader.run(client, token))
            slow = await _raw_stream(server.port, slow_token)
            await _until(lambda: reader.events("hello"), "the reader's hello")
            channel = live_keys.user_channel(slow_user.pk)
            redis = get_redis()
            for n in range(flood):
                event = json.dumps({"v": n + 1, "reason": "deliver", "pad": pad}, separators=(",", ":"))
                await asyncio.to_thread(redis.publish, channel, event)
            # The other stream hears a broadcast at once, whatever the slow one does.
            await _publish(live.broadcast, scope=live.BROADCAST_EVERYONE, reason="bulletin", ref="b1")
            await _until(lambda: reader.events("inbox"), "the broadcast on the reading stream")
            # Now the slow client reads what it was given: part of the flood, a
            # resync, and the end of the response (the stream was dropped).
            received = b""
            while not received.endswith(b"0\r\n\r\n"):
                data = await asyncio.wait_for(loop.sock_recv(slow, 1 << 20), 15)
                assert data, received[-200:]
                received += data
            slow.close()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        got = received.count(b'"reason":"deliver"')
        assert 0 < got < flood
        # The last chunk of the body is the resync event, then the response's end.
        assert received.endswith(b'event: inbox\ndata: {"reason":"resync","spread":2000}\n\n\r\n0\r\n\r\n')

    asyncio.run(scenario())


def test_the_server_shuts_down_through_the_lifespan_and_closes_the_hub(server: ServedProcess) -> None:
    _, token = _user("live-bye")

    async def scenario() -> None:
        reader = Reader()
        async with httpx.AsyncClient(base_url=server.url, timeout=30.0) as client:
            task = asyncio.create_task(reader.run(client, token))
            await _until(lambda: reader.events("hello"), "hello")  # the hub is up, subscribed
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
    # uvicorn ends by raising the signal it handled again once it shut down cleanly.
    assert server.stop() in (0, -signal.SIGTERM), server.text()
    log = server.text()
    assert CLOSED in log, log
    assert "Traceback" not in log, log
