"""The hub writes an event to every idle stream itself, the same bytes to each.

Streams here are served through a sink, as the stream's own ASGI route
serves them (``EventStream.serve``), by the loop's hub on the run's real
Redis pub/sub. A broadcast is one frame, written from the hub's reader task
to every stream that is not busy: no stream's task wakes for it. A stream
whose write cannot finish at once (its client is not reading: the server
waits for the socket to drain) still gets every event, in order, once it
drains; one that stays stuck gets a single ``resync`` for what it missed; one
whose connection fails ends and leaves the hub. A stream whose server lends
the hub its socket (``live.DirectWrite``; here a real socket pair) gets the
event written straight to the socket, a broadcast's writes shared between
threads; what a full socket does not take goes back to the server, and a
failed connection ends the stream.
"""

import asyncio
import json
import os
import socket
import threading
import time
from collections.abc import Awaitable
from typing import Any

import pytest
import redis.asyncio

from core import keys, live, metrics
from core.redis import get_redis

pytestmark = pytest.mark.not_on_cluster(reason="event streams are off on Redis Cluster by design (pages poll)")

FIRST_USER = 990_001


class Client:
    """One stream's ASGI side: what was written, and by which task.

    ``gate``, when set and not done, makes a write wait for it first, as a
    server's send waits for a socket buffer a slow client leaves full.
    """

    def __init__(self, user_id: int) -> None:
        self.stream = live.EventStream(user_id=user_id, event="inbox")
        self.chunks: list[bytes] = []
        self.writers: list[str] = []
        self.gate: asyncio.Future[None] | None = None
        self.fail = False
        self.task: asyncio.Task[None] | None = None

    def sink(self, chunk: bytes) -> Awaitable[None]:
        # Called (not yet awaited) by whoever writes: the hub or the stream's own task.
        task = asyncio.current_task()
        self.writers.append(task.get_name() if task else "")
        return self._send(chunk)

    async def _send(self, chunk: bytes) -> None:
        if self.fail and b"event: inbox" in chunk:
            raise OSError("connection reset")
        gate = self.gate
        if gate is not None and not gate.done():
            await gate
        self.chunks.append(chunk)

    def start(self) -> None:
        self.task = asyncio.create_task(self.stream.serve(self.sink))

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        found = []
        for block in b"".join(self.chunks).decode().split("\n\n"):
            lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
            if "event" in lines:
                found.append((lines["event"], json.loads(lines["data"])))
        return found

    def reasons(self) -> list[str]:
        return [data["reason"] for name, data in self.events() if name == "inbox"]


async def _until(check: Any, what: str, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def _open(count: int, kind: type[Any] = Client) -> list[Any]:
    clients = [kind(FIRST_USER + n) for n in range(count)]
    for client in clients:
        client.start()
    await _until(lambda: all(c.events()[:1] == [("hello", {"v": 0})] for c in clients), "every hello")
    return clients


async def _close(clients: list[Client]) -> None:
    for client in clients:
        if client.gate is not None and not client.gate.done():
            # What a server does when the client goes: a waiting write returns.
            client.gate.set_result(None)
        client.stream.close()
    await asyncio.gather(*(c.task for c in clients if c.task is not None))
    await live.hub_close()


async def _broadcast(reason: str) -> None:
    await asyncio.to_thread(live.broadcast, scope=live.BROADCAST_EVERYONE, reason=reason)


@pytest.fixture(autouse=True)
def _long_streams(settings: Any) -> None:
    # No cap and no heartbeat within a test: every chunk written is an event.
    settings.MESSAGECENTER_LIVE_STREAM_SECONDS = 60
    settings.MESSAGECENTER_LIVE_HEARTBEAT_SECONDS = 60


def test_a_broadcast_is_one_frame_the_hub_writes_to_every_stream() -> None:
    async def scenario() -> list[Client]:
        clients = await _open(5)
        try:
            await _broadcast("bulletin")
            await _until(lambda: all(len(c.chunks) == 2 for c in clients), "the broadcast on every stream")
            await asyncio.to_thread(live.inbox_changed, user_ids=[FIRST_USER + 2], reason="deliver")
            await _until(lambda: len(clients[2].chunks) == 3, "the user's event")
        finally:
            await _close(clients)
        return clients

    clients = asyncio.run(scenario())
    frames = [client.chunks[1] for client in clients]
    # Encoded once: the very same bytes object went to every stream.
    assert all(frame is frames[0] for frame in frames)
    assert clients[0].events()[1] == (
        "inbox",
        {"reason": "bulletin", "scope": "everyone", "spread": live.BROADCAST_SPREAD_MS},
    )
    for client in clients:
        # The opening came from the stream's own task; the broadcast from the hub's reader,
        # which woke no stream's task to write it.
        opening, event = client.writers[:2]
        assert opening != "live-hub-read"
        assert event == "live-hub-read"
    # A user's event takes the same path, to that user's streams only.
    assert clients[2].reasons() == ["bulletin", "deliver"]
    assert clients[2].writers[2] == "live-hub-read"
    assert [len(c.chunks) for c in clients] == [2, 2, 3, 2, 2]


def test_a_stream_whose_write_must_wait_gets_every_event_in_order() -> None:
    async def scenario() -> Client:
        (client,) = await _open(1)
        try:
            client.gate = asyncio.get_running_loop().create_future()
            await _broadcast("first")  # the hub's write starts and waits at the gate
            await _until(lambda: len(client.writers) == 2, "the hub's write to start (and wait)")
            await asyncio.to_thread(live.inbox_changed, user_ids=[FIRST_USER], reason="second")
            await _broadcast("third")
            await _until(lambda: len(client.stream._listener.frames) == 2, "two events to queue")
            assert client.reasons() == []  # nothing written while the client does not read
            client.gate.set_result(None)
            await _until(lambda: len(client.reasons()) == 3, "the three events")
            await _broadcast("fourth")  # idle again: the hub writes it itself
            await _until(lambda: len(client.reasons()) == 4, "the fourth event")
        finally:
            await _close([client])
        return client

    client = asyncio.run(scenario())
    assert client.reasons() == ["first", "second", "third", "fourth"]
    # The stalled write and the queued two were finished by the stream's own task.
    assert client.writers[-1] == "live-hub-read"
    assert "live-hub-read" not in client.writers[2:-1]
    assert client.events()[2][1]["v"] == 1  # the user's event kept its version


def test_a_stream_stuck_past_its_backlog_gets_one_resync() -> None:
    async def scenario() -> Client:
        (client,) = await _open(1)
        try:
            client.gate = asyncio.get_running_loop().create_future()
            await _broadcast("stuck")
            await _until(lambda: len(client.writers) == 2, "the hub's write to start (and wait)")
            # One more than a stream holds: the held ones fold into a single resync.
            for n in range(live.STREAM_BACKLOG + 1):
                await _broadcast(f"missed-{n}")
            await _until(lambda: client.stream._listener.frames == [live.RESYNC_EVENT], "the backlog to fold")
            client.gate.set_result(None)
            await _until(lambda: len(client.reasons()) == 2, "the stalled write and the resync")
        finally:
            await _close([client])
        return client

    assert asyncio.run(scenario()).reasons() == ["stuck", "resync"]


def test_a_stream_whose_connection_fails_ends_and_leaves_the_hub() -> None:
    async def scenario() -> tuple[list[Client], int, int]:
        clients = await _open(2)
        clients[0].fail = True
        try:
            await _broadcast("bulletin")
            await _until(lambda: clients[0].task is not None and clients[0].task.done(), "the failed stream to end")
            await _until(lambda: len(clients[1].chunks) == 2, "the other stream's event")
            central = live.hub()
            left = central.stream_count()
            await _until(lambda: central.subscribed_users() == 1, "the failed stream's channel to go")
            users = central.subscribed_users()
        finally:
            await _close(clients)
        return clients, left, users

    clients, left, users = asyncio.run(scenario())
    assert clients[0].task is not None
    assert clients[0].task.exception() is None  # ended, not crashed
    assert clients[0].reasons() == []
    assert clients[1].reasons() == ["bulletin"]
    assert (left, users) == (1, 1)


def test_streams_opening_together_read_each_user_s_version_in_shared_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    real_mget = redis.asyncio.Redis.mget

    async def counted_mget(self: Any, keys: Any, *args: Any) -> Any:
        reads.append(len(keys))
        return await real_mget(self, keys, *args)

    monkeypatch.setattr(redis.asyncio.Redis, "mget", counted_mget)
    # Users 1 and 3 have versions of their own; the others none yet.
    live.inbox_changed(user_ids=[FIRST_USER + 1, FIRST_USER + 3], reason="deliver")
    live.inbox_changed(user_ids=[FIRST_USER + 3], reason="read")

    async def scenario() -> list[Client]:
        clients = [Client(FIRST_USER + n) for n in range(5)]
        for client in clients:
            client.start()
        try:
            await _until(lambda: all(c.events()[:1] for c in clients), "every hello")
        finally:
            await _close(clients)
        return clients

    clients = asyncio.run(scenario())
    assert [c.events()[0] for c in clients] == [("hello", {"v": v}) for v in (0, 1, 0, 2, 0)]
    # Read with MGET, in batches of the streams that opened together: never a GET per stream.
    assert sum(reads) == 5


def test_events_that_arrive_together_reach_each_stream_in_one_write() -> None:
    async def scenario() -> list[Client]:
        clients = await _open(3)
        try:
            # Published while this loop is blocked, so that all of them wait on the
            # hub's socket when it reads next (the sleep lets Redis flush them there).
            pipe = get_redis().pipeline(transaction=False)
            for n in range(5):
                event = live.broadcast_event(scope=live.BROADCAST_EVERYONE, reason=f"burst-{n}")
                pipe.publish(keys.live_broadcast_channel(live.BROADCAST_EVERYONE), event)
            pipe.publish(keys.live_user_channel(FIRST_USER + 1), '{"v":7,"reason":"mine"}')
            pipe.execute()
            time.sleep(0.05)
            await _until(lambda: [len(c.reasons()) for c in clients] == [5, 6, 5], "the burst")
        finally:
            await _close(clients)
        return clients

    clients = asyncio.run(scenario())
    burst = [f"burst-{n}" for n in range(5)]
    assert clients[0].reasons() == burst
    assert clients[1].reasons() == [*burst, "mine"]
    assert clients[2].reasons() == burst
    # One write per stream for the whole burst, from the hub; the streams given
    # the same events got the very same bytes.
    assert [c.writers[1:] for c in clients] == [["live-hub-read"]] * 3
    assert clients[0].chunks[1] is clients[2].chunks[1]


class SocketDirect:
    """A stream's socket as a server lends it to the hub (``live.DirectWrite``):
    one end of a real socket pair, non-blocking; the client reads the other.
    It is idle while nothing it was handed back (``rest``) waits, as a
    server's transport is while it holds nothing unsent."""

    def __init__(self) -> None:
        self.ours, self.peer = socket.socketpair()
        self.ours.setblocking(False)
        self.peer.setblocking(False)
        self.fd = self.ours.fileno()
        self.rests: list[bytes] = []
        self.received = b""

    def idle(self) -> bool:
        return not self.rests

    def rest(self, data: bytes) -> None:
        self.rests.append(data)

    def read(self) -> bytes:
        while True:
            try:
                data = self.peer.recv(65536)
            except BlockingIOError:
                return self.received
            if not data:
                return self.received
            self.received += data

    def close(self) -> None:
        self.ours.close()
        self.peer.close()


class DirectClient(Client):
    def __init__(self, user_id: int) -> None:
        super().__init__(user_id)
        self.direct = SocketDirect()

    def start(self) -> None:
        self.task = asyncio.create_task(self.stream.serve(self.sink, self.direct))


def _frame(reason: str) -> bytes:
    event = live.broadcast_event(scope=live.BROADCAST_EVERYONE, reason=reason)
    return b"event: inbox\ndata: " + event.encode() + b"\n\n"


def _direct_count() -> float:
    return metrics.LIVE_WRITES.labels(way="direct")._value.get()


async def _open_direct(count: int) -> list["DirectClient"]:
    clients: list[DirectClient] = await _open(count, DirectClient)
    return clients


@pytest.fixture
def helper_threads(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Any:
    """Three threads write a broadcast, two streams a part at least; the helpers' pool is the test's own."""
    settings.MESSAGECENTER_LIVE_WRITE_SPLIT = 2
    monkeypatch.setattr(live, "WRITE_THREADS", 3)
    monkeypatch.setattr(live, "_writers", None)
    parts: list[tuple[str, list[int]]] = []
    real = live._write_fds

    def recorded(fds: Any, data: bytes, first: int) -> Any:
        parts.append((threading.current_thread().name, list(fds)))
        return real(fds, data, first)

    monkeypatch.setattr(live, "_write_fds", recorded)
    yield parts
    if live._writers is not None:
        live._writers.shutdown()


def test_the_hub_writes_an_event_straight_to_lent_sockets_a_broadcast_in_parts_on_several_threads(
    helper_threads: list[tuple[str, list[int]]],
) -> None:
    before = _direct_count()

    async def scenario() -> tuple[list[DirectClient], str]:
        clients = await _open_direct(6)
        try:
            await _broadcast("bulletin")
            await _until(lambda: all(c.direct.read() for c in clients), "the broadcast on every socket")
            await asyncio.to_thread(live.inbox_changed, user_ids=[FIRST_USER + 4], reason="deliver")
            await _until(lambda: b"deliver" in clients[4].direct.read(), "the user's event")
        finally:
            await _close(clients)
        return clients, threading.current_thread().name

    clients, loop_thread = asyncio.run(scenario())
    try:
        broadcast = live.chunk(_frame("bulletin"))
        for index, client in enumerate(clients):
            # The opening went through the stream's send; every event straight to its socket.
            assert client.events() == [("hello", {"v": 0})]
            assert len(client.writers) == 1
            assert client.writers[0] != "live-hub-read"
            user_event = live.chunk(b'event: inbox\ndata: {"v":1,"reason":"deliver"}\n\n') if index == 4 else b""
            assert client.direct.received == broadcast + user_event
            assert client.direct.rests == []
        # The broadcast: three parts of two sockets, one written by the loop's own
        # thread, the others by helpers at the same time; the user's event by the loop alone.
        # (The hub holds its streams in a set: which part a socket falls in is not fixed.)
        fds = [client.direct.fd for client in clients]
        broadcast_parts = helper_threads[:3]
        assert sorted(len(part) for _, part in broadcast_parts) == [2, 2, 2]
        assert sorted(fd for _, part in broadcast_parts for fd in part) == sorted(fds)
        threads = sorted(name for name, _ in broadcast_parts)
        assert loop_thread in threads
        threads.remove(loop_thread)
        assert all(name.startswith("live-writes") for name in threads)
        assert helper_threads[3:] == [(loop_thread, [fds[4]])]
        assert _direct_count() - before == 7
    finally:
        for client in clients:
            client.direct.close()


def test_what_a_full_socket_does_not_take_goes_back_to_the_server_and_then_the_events_go_through_send() -> None:
    async def scenario() -> tuple[DirectClient, bytes]:
        (client,) = await _open_direct(1)
        # The client stops reading: fill the socket until it takes nothing more.
        filler = b""
        while True:
            try:
                written = os.write(client.direct.fd, b"x" * 997)
            except BlockingIOError:
                break
            filler += b"x" * written
        try:
            await _broadcast("first")
            await _until(lambda: client.direct.rests, "the unsent part handed back")
            await _broadcast("second")  # the server holds unsent bytes: through the send, after them
            await _until(lambda: len(client.chunks) == 2, "the second event through the send")
        finally:
            await _close([client])
        return client, filler

    client, filler = asyncio.run(scenario())
    try:
        # What reached the socket and what was handed back make the whole chunk, in order.
        first = live.chunk(_frame("first"))
        assert client.direct.read() + b"".join(client.direct.rests) == filler + first
        assert client.reasons() == ["second"]
    finally:
        client.direct.close()


def test_a_lent_socket_whose_connection_failed_ends_its_stream() -> None:
    async def scenario() -> tuple[list[DirectClient], int]:
        clients = await _open_direct(2)
        clients[0].direct.peer.close()  # the client went away
        try:
            await _broadcast("bulletin")
            await _until(lambda: clients[0].task is not None and clients[0].task.done(), "the failed stream to end")
            await _until(lambda: clients[1].direct.read(), "the other stream's event")
            central = live.hub()
            await _until(lambda: central.stream_count() == 1, "the failed stream to leave the hub")
            left = central.stream_count()
        finally:
            await _close(clients)
        return clients, left

    clients, left = asyncio.run(scenario())
    try:
        assert clients[0].task is not None
        assert clients[0].task.exception() is None  # ended, not crashed
        assert clients[1].direct.received == live.chunk(_frame("bulletin"))
        assert left == 1
    finally:
        clients[0].direct.ours.close()
        clients[1].direct.close()
