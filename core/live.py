"""Live updates: a version counter and a pub/sub channel per user, shared
channels for what many users see at once, and the server-sent event stream
that forwards them to open pages.

The transport knows no app. Writers call ``inbox_changed`` after their Redis
write succeeded; it bumps each user's version and publishes
``{"v": version, "reason": ...}`` on the user's channel (one small script per
user: one round trip). A fan-out script may do the same inside its own call
(``event_parts``). What reaches many users at once (a message to everyone, a
bulletin, an announcement, a retraction) goes out once on a broadcast channel
(``broadcast``: ``everyone`` or a platform), now or, for a time still ahead,
when it comes (the due zset, ``due_publish``). Publishing is best effort: a
failure is logged and never fails the write (the polling fallback still sees
the new counts once Redis is back).

Readers: under ASGI every stream of a process goes through that process's
``LiveHub``: one pub/sub connection, subscribed once to the broadcast
channels and to each user channel while a stream of that user is open, that
fans each event out to the local streams: one frame, written from the hub's
loop to every stream that is idle. A stream holds a few hundred bytes of its
own and no connection. Under WSGI each stream keeps its own blocking
pub/sub (``event_stream``; a worker thread per stream cannot scale anyway).
A stream lives at most ``MESSAGECENTER_LIVE_STREAM_SECONDS`` and sends a
comment line every ``MESSAGECENTER_LIVE_HEARTBEAT_SECONDS``: the heartbeat
lets a server notice a closed connection, and the cap hands resources back
(the browser reconnects after the ``retry`` hint).
"""

import asyncio
import json
import logging
import os
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from types import CoroutineType
from typing import Any, Protocol

import redis.asyncio
from django.conf import settings
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from core import keys, metrics
from core.lua import LuaScript
from core.platforms import ALL_PLATFORMS
from core.redis import get_redis, is_cluster

logger = logging.getLogger(__name__)

SCRIPT = LuaScript(__file__, "lua/live.lua")
DUE_SCRIPT = LuaScript(__file__, "lua/live_due.lua")

RETRY_MS = 3000
# The retry hint of a stream that could not start (Redis unreachable): the
# page polls meanwhile, and a thousand pages do not come back every 3 s.
RETRY_DOWN_MS = 15_000
HEARTBEAT = b": keepalive\n\n"

BROADCAST_EVERYONE = "everyone"
# A broadcast makes every open page refetch its counts: each page waits a
# random part of this many milliseconds first (the event's "spread"), so ten
# thousand pages do not ask in the same instant.
BROADCAST_SPREAD_MS = 2000
# Due broadcast events published per script call (a backlog takes several).
DUE_BATCH = 100
# How long a new stream waits for its channel's subscription before it gives
# up (the hub's Redis is unreachable) and ends with a retry hint.
SUBSCRIBE_WAIT_SECONDS = 5.0
# Channels per SUBSCRIBE command when many streams open at once.
SUBSCRIBE_BATCH = 1000
# Events the hub hands out together when they arrived together (one write per
# stream for all of them); past that it starts another round.
HUB_BURST = 256
# Events a stream holds while its client does not read; past that they are
# replaced by one "resync" event (the page refetches everything anyway).
STREAM_BACKLOG = 16
# The hub's connection: a PING when it was silent this long, and given up
# (reconnected) when nothing at all came back for twice as long.
HUB_HEALTH_SECONDS = 15.0
HUB_RECONNECT_MAX_SECONDS = 5.0
# How often a hub (and a blocking stream) publishes due broadcast events at
# the latest; sooner when the next one is due sooner.
DUE_TICK_SECONDS = 1.0
HUB_CLIENT_NAME = "mc-live-hub"
# Closing the hub: how long each round waits for its cancelled tasks, and how
# many rounds of cancelling it tries.
HUB_CLOSE_WAIT_SECONDS = 1.0
HUB_CLOSE_ROUNDS = 3
# Threads that may write one broadcast's frames at once (the hub's loop and
# helpers): the kernel's side of a socket write runs without the GIL, so on
# a machine of several cores the writes to ten thousand streams share them.
WRITE_THREADS = max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1))


# --- writers ----------------------------------------------------------------------


def inbox_changed(*, user_ids: Iterable[int], reason: str) -> None:
    """Bump the users' versions and tell their open pages; never raises.

    One live.lua call per user (INCR and PUBLISH in one round trip), the
    calls of several users in one pipeline on a single Redis.
    """
    calls = changed_calls(user_ids=user_ids, reason=reason)
    if not calls:
        return
    try:
        client = get_redis()
        if len(calls) == 1 or is_cluster():
            for script_keys, args in calls:
                SCRIPT(script_keys, args, client=client)
            return
        pipe = client.pipeline(transaction=False)
        for script_keys, args in calls:
            SCRIPT(script_keys, args, client=pipe)
        pipe.execute()
    except RedisError:
        logger.warning("live update for %d user(s) not published", len(calls), exc_info=True)


def changed_calls(*, user_ids: Iterable[int], reason: str) -> list[tuple[list[str], list[Any]]]:
    """live.lua's (keys, args) per user: ``inbox_changed`` runs them, a writer
    that wants them in its own pipeline queues them (``SCRIPT.queue``)."""
    publish = available()  # no streams on a cluster (pages poll): the versions are what counts
    head, tail = event_parts(reason)
    return [
        ([keys.live_user_version(int(user_id))], [keys.live_user_channel(int(user_id)) if publish else "", head, tail])
        for user_id in user_ids
    ]


def event_parts(reason: str) -> tuple[str, str]:
    """An event is ``head + version + tail``: a fan-out script builds each
    recipient's event from these, so every writer sends the same JSON."""
    return '{"v":', ',"reason":' + json.dumps(reason) + "}"


def broadcast_scopes() -> tuple[str, ...]:
    """Every broadcast scope: everyone, and one per platform (announcements)."""
    return (BROADCAST_EVERYONE, *ALL_PLATFORMS)


def broadcast_event(*, scope: str, reason: str, ref: str = "") -> str:
    """The JSON a broadcast carries: no version (it is nobody's in particular),
    the ``spread`` a page waits at most before refetching its counts."""
    event = {"reason": reason, "scope": scope, "spread": BROADCAST_SPREAD_MS}
    if ref:
        event["ref"] = ref
    return json.dumps(event, separators=(",", ":"))


def broadcast_parts(*, scope: str, reason: str, ref: str = "") -> tuple[str, str]:
    """A broadcast's channel and event, for a script that publishes it within
    its own call (a round trip less than ``broadcast`` after it); ("", "")
    where pages poll instead (a cluster)."""
    if not available():
        return "", ""
    return keys.live_broadcast_channel(scope), broadcast_event(scope=scope, reason=reason, ref=ref)


def broadcast(*, scope: str, reason: str, ref: str = "", at_ms: int | None = None) -> None:
    """Tell every open page of ``scope`` (``everyone`` or a platform) that what it
    shows changed; never raises.

    ``at_ms`` still ahead (a scheduled bulletin's display time, an
    announcement's publish time): the event waits in the due zset and goes
    out when that time comes (``due_publish``). The same scope, reason and
    ``ref`` again only moves its time, so an edit never tells pages twice.
    """
    channel, event = broadcast_parts(scope=scope, reason=reason, ref=ref)
    if not channel:
        return
    try:
        client = get_redis()
        if at_ms is not None and at_ms > int(time.time() * 1000):
            client.zadd(keys.live_due(), {f"{channel}\n{event}": int(at_ms)})
        else:
            client.publish(channel, event)
    except RedisError:
        logger.warning("live broadcast %s/%s not published", scope, reason, exc_info=True)


def broadcast_cancel(*, scope: str, reason: str, ref: str) -> None:
    """Drop a broadcast still waiting for its time (its item is gone); never raises."""
    if not available():
        return
    member = f"{keys.live_broadcast_channel(scope)}\n{broadcast_event(scope=scope, reason=reason, ref=ref)}"
    try:
        get_redis().zrem(keys.live_due(), member)
    except RedisError:
        logger.warning("live broadcast %s/%s not cancelled", scope, reason, exc_info=True)


def due_publish(*, now_ms: int | None = None) -> int | None:
    """Publish the broadcast events whose time has come; returns when the next
    one is due (ms), None when none waits. Raises RedisError."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    client = get_redis()
    while True:
        published, following = DUE_SCRIPT([keys.live_due()], [now, DUE_BATCH], client=client)
        if int(published) < DUE_BATCH:
            return int(following) if following else None


# --- readers ----------------------------------------------------------------------


def user_version(*, user_id: int) -> int:
    raw = get_redis().get(keys.live_user_version(user_id))
    return int(raw or 0)


def available() -> bool:
    """Pub/sub streams need a single Redis server: on a cluster pages poll instead."""
    return not is_cluster()


@contextmanager
def subscribe(*, user_id: int, scopes: Iterable[str] = ()) -> Iterator[Any]:
    """A blocking pub/sub on the user's channel and these broadcast scopes'
    (``get_message(timeout=...)``)."""
    pubsub = get_redis().pubsub(ignore_subscribe_messages=True)
    try:
        pubsub.subscribe(keys.live_user_channel(user_id), *(keys.live_broadcast_channel(s) for s in scopes))
        yield pubsub
    finally:
        pubsub.close()


def decode_event(message: Any) -> dict[str, Any] | None:
    """The event of a pub/sub message, or None for anything else."""
    if not message or message.get("type") != "message":
        return None
    data = message.get("data")
    try:
        event = json.loads(data.decode() if isinstance(data, bytes) else data)
    except (TypeError, ValueError):
        return None
    return event if isinstance(event, dict) else None


def sse_frame(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _raw_frame(event: bytes, data: bytes) -> bytes:
    # Events are compact JSON (json.dumps, live.lua): never a line break.
    return b"event: " + event + b"\ndata: " + data + b"\n\n"


def _opening(version: int) -> bytes:
    # The version lets a page that reconnects refresh once if it missed events.
    return f"retry: {RETRY_MS}\n\n".encode() + sse_frame("hello", {"v": version})


def _unavailable() -> bytes:
    return f"retry: {RETRY_DOWN_MS}\n\n".encode() + sse_frame("unavailable", {"retry": RETRY_DOWN_MS})


def _stream_seconds() -> float:
    return float(settings.MESSAGECENTER_LIVE_STREAM_SECONDS)


def _heartbeat_seconds() -> float:
    return float(settings.MESSAGECENTER_LIVE_HEARTBEAT_SECONDS)


def stream_scopes(platforms: Iterable[str]) -> list[str]:
    """The broadcast scopes a user's stream hears: everyone, and the user's platforms."""
    return [BROADCAST_EVERYONE, *(p for p in platforms if p in ALL_PLATFORMS)]


_due_checked = 0.0


def _due_tick() -> None:
    """Publish due broadcasts at most once a second per process (WSGI streams)."""
    global _due_checked
    now = time.monotonic()
    if now - _due_checked < DUE_TICK_SECONDS:
        return
    _due_checked = now
    with suppress(RedisError):
        due_publish()


def event_stream(*, user_id: int, event: str, platforms: Iterable[str] = ()) -> Iterator[bytes]:
    """Blocking stream (WSGI) of the user's events and the broadcasts of the
    user's scopes, each sent as an SSE ``event``.

    Subscribes before reading the version, so no event falls in between.
    """
    deadline = time.monotonic() + _stream_seconds()
    heartbeat = min(_heartbeat_seconds(), DUE_TICK_SECONDS)
    beat = _heartbeat_seconds()
    name = event.encode()
    with (
        subscribe(user_id=user_id, scopes=stream_scopes(platforms)) as pubsub,
        metrics.LIVE_STREAMS.track_inprogress(),
    ):
        yield _opening(user_version(user_id=user_id))
        quiet_since = time.monotonic()
        while (remaining := deadline - time.monotonic()) > 0:
            _due_tick()
            message = pubsub.get_message(timeout=min(heartbeat, remaining))
            if message and message.get("type") == "message" and decode_event(message) is not None:
                data = message["data"]
                yield _raw_frame(name, data if isinstance(data, bytes) else str(data).encode())
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= beat:
                yield HEARTBEAT
                quiet_since = time.monotonic()


# --- the hub: one pub/sub connection per process (ASGI) ------------------------------


# What a stream writes through under ASGI: one call per chunk of SSE bytes,
# returning the ASGI ``send`` coroutine for it.
Sink = Callable[[bytes], Awaitable[None]]


class DirectWrite(Protocol):
    """What a stream's server lets the hub do with the stream's socket, when it
    can (``core.live_asgi``): write whole body chunks of the response (HTTP/1.1
    chunked framing, ``chunk``) straight to the non-blocking socket ``fd``
    while the server holds nothing unsent for it (``idle``), and hand back
    what the socket did not take (``rest``: the server writes it in order,
    with its own buffering and flow control)."""

    fd: int

    def idle(self) -> bool: ...

    def rest(self, data: bytes) -> None: ...


def chunk(frame: bytes) -> bytes:
    """One HTTP/1.1 chunk of a response body carrying ``frame``."""
    return b"%x\r\n%s\r\n" % (len(frame), frame)


class _Listener:
    """One open stream: the events waiting for it and the future it sleeps on.

    Under ASGI a stream also has a ``sink`` once its opening is sent, and the
    hub writes an event through it at once, from its own loop, when nothing
    else of the stream is in flight (``offer``): a broadcast to ten thousand
    streams is one loop of writes of the same bytes, not ten thousand task
    wake-ups (each of which cost more than the write itself). When the stream
    is busy (its task is writing, or a write waits for the client to read),
    events queue in ``frames`` and its task sends them in order. When the
    server lets the hub at the stream's socket (``direct``), the hub skips
    the send and writes the chunk to the socket itself (``_write_direct``):
    ten thousand sends cost the server more Python than the writes cost the
    kernel, and the writes can share the machine's cores.
    """

    __slots__ = ("busy", "closed", "direct", "event", "frames", "platforms", "sink", "stalled", "waiter", "writes")

    def __init__(self, platforms: frozenset[str], event: bytes = b"message") -> None:
        self.frames: list[bytes] = []
        self.waiter: asyncio.Future[None] | None = None
        self.platforms = platforms
        self.event = event
        self.closed = False
        self.sink: Sink | None = None
        # The stream's socket, when its server lets the hub write to it (``DirectWrite``).
        self.direct: DirectWrite | None = None
        # The stream's task is inside a send of its own: the hub must not write meanwhile.
        self.busy = False
        # A write of the hub's that could not finish at once (the client's socket
        # buffer is full, so the server waits for it to drain): the awaitable
        # and what it waits on, for the stream's task to finish.
        self.stalled: tuple[Awaitable[None], Any] | None = None
        self.writes = 0

    def push(self, data: bytes) -> None:
        if len(self.frames) >= STREAM_BACKLOG:
            # A client that stopped reading: one catch-all event stands for them all.
            self.frames = [RESYNC_EVENT]
        else:
            self.frames.append(data)
        self.wake()

    def offer(self, events: Sequence[bytes], frame: bytes) -> None:
        """``events`` for this stream, ``frame`` their SSE bytes (shared by every
        stream given the same events): written now when the stream is idle,
        else queued."""
        sink = self.sink
        if sink is None or self.busy or self.frames or self.stalled is not None or self.closed:
            for data in events:
                self.push(data)
            return
        self.writes += 1
        pending = sink(frame)
        # The exact type first: an isinstance check against the ABC alone took
        # longer than the rest of the write's Python (per stream, per event).
        if type(pending) is not CoroutineType and not isinstance(pending, Coroutine):
            self.stalled = (pending, None)
            self.wake()
            return
        # Run the send coroutine here rather than in a task of its own: an
        # ASGI server's send of a body chunk normally hands the bytes to the
        # socket and returns without suspending (Python 3.12's eager tasks do
        # the same). Only when it suspends (flow control) does the stream's
        # task take the rest over (``_finish``), driving it as a task would.
        try:
            waiting = pending.send(None)
        except StopIteration:
            return
        except Exception:
            # The connection is gone (the server raised mid-write): the stream ends.
            logger.debug("live stream: write failed", exc_info=True)
            self.closed = True
            self.wake()
            return
        self.stalled = (pending, waiting)
        self.wake()

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        waiter = self.waiter = loop.create_future()
        handle = loop.call_later(timeout, _release, waiter)
        try:
            await waiter
        finally:
            handle.cancel()
            self.waiter = None


async def _finish(pending: Awaitable[None], waiting: Any) -> None:
    """Finish a write that ``_Listener.offer`` started and that suspended on
    ``waiting`` (a future, or None for a bare yield), the way a task would:
    wait for it, then resume the coroutine, until it returns."""
    if not isinstance(pending, Coroutine):
        await pending
        return
    try:
        while True:
            if waiting is None:
                await asyncio.sleep(0)
            elif not asyncio.isfuture(waiting):
                raise RuntimeError(f"live stream: a send awaited {waiting!r}, not a future")
            else:
                # What the coroutine awaits marked itself blocking for a task's
                # benefit; this wait stands in for that task.
                waiting._asyncio_future_blocking = False
                await asyncio.wait((waiting,))
            try:
                waiting = pending.send(None)
            except StopIteration:
                return
    finally:
        pending.close()


def _release(waiter: "asyncio.Future[None]") -> None:
    if not waiter.done():
        waiter.set_result(None)


def _direct_ready(listener: _Listener) -> bool:
    """The hub may write to the stream's socket itself: its server lets it, and
    neither the stream's task nor the server holds anything of it unsent."""
    direct = listener.direct
    return (
        direct is not None
        and not (listener.busy or listener.frames or listener.closed or listener.stalled is not None)
        and direct.idle()
    )


def _write_fds(fds: Sequence[int], data: bytes, first: int) -> list[tuple[int, int]]:
    """Write ``data`` to each non-blocking socket; the ones it did not wholly
    reach, as (index from ``first``, bytes written: 0 when the socket was
    full, -1 when the connection failed)."""
    short = []
    size = len(data)
    write = os.write
    for index, fd in enumerate(fds, first):
        try:
            written = write(fd, data)
        except BlockingIOError:
            written = 0
        except OSError:
            written = -1
        if written != size:
            short.append((index, written))
    return short


_writers: ThreadPoolExecutor | None = None


def _write_split(fds: list[int], data: bytes) -> list[tuple[int, int]]:
    """``_write_fds`` over every socket, in parts written by this thread and
    helper threads at once when there are enough of them
    (``MESSAGECENTER_LIVE_WRITE_SPLIT`` a part at least). This thread waits
    for the helpers: the event loop would be busy writing anyway, and no
    other write to these sockets can start meanwhile."""
    global _writers
    parts = min(WRITE_THREADS, len(fds) // max(1, int(settings.MESSAGECENTER_LIVE_WRITE_SPLIT)))
    if parts <= 1:
        return _write_fds(fds, data, 0)
    if _writers is None:
        _writers = ThreadPoolExecutor(max_workers=WRITE_THREADS - 1, thread_name_prefix="live-writes")
    size = -(-len(fds) // parts)
    helpers: list[Future[list[tuple[int, int]]]] = [
        _writers.submit(_write_fds, fds[start : start + size], data, start) for start in range(size, len(fds), size)
    ]
    short = _write_fds(fds[:size], data, 0)
    for helper in helpers:
        short += helper.result()
    return short


def _hand_out(entries: Iterable[tuple[_Listener, Sequence[bytes], bytes]]) -> None:
    """Give each stream its events (``frame``: their SSE bytes, shared by the
    streams given the same events): straight to the sockets the server lets
    the hub write to, all of one frame in one ``_write_direct``; through each
    other stream's send (or its queue, ``_Listener.offer``)."""
    direct: dict[bytes, list[_Listener]] = {}
    sent = 0
    for listener, events, frame in entries:
        if _direct_ready(listener):
            direct.setdefault(frame, []).append(listener)
        else:
            listener.offer(events, frame)
            sent += 1
    written = 0
    for frame, ready in direct.items():
        _write_direct(ready, frame)
        written += len(ready)
    if sent:
        _SENT.inc(sent)
    if written:
        _DIRECT.inc(written)


_SENT = metrics.LIVE_WRITES.labels(way="send")
_DIRECT = metrics.LIVE_WRITES.labels(way="direct")


def _write_direct(listeners: list[_Listener], frame: bytes) -> None:
    """Write ``frame`` as one body chunk straight to each stream's socket (each
    ``_direct_ready``); what a full socket did not take goes through its
    server after it, and a stream whose connection failed ends."""
    data = chunk(frame)
    fds = [listener.direct.fd for listener in listeners]  # type: ignore[union-attr]
    short = _write_split(fds, data)
    for listener in listeners:
        listener.writes += 1
    for index, written in short:
        listener = listeners[index]
        if written < 0:
            logger.debug("live stream: direct write failed")
            listener.closed = True
            listener.wake()
        else:
            listener.direct.rest(data[written:])  # type: ignore[union-attr]


# Sent to every stream of a hub that lost its connection and got it back, and
# to a stream that fell behind: events may have been missed, refetch everything.
RESYNC_EVENT = json.dumps({"reason": "resync", "spread": BROADCAST_SPREAD_MS}, separators=(",", ":")).encode()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class LiveHub:
    """The pub/sub side of every stream of one event loop (a uvicorn worker).

    One connection subscribes to the broadcast channels for good and to a
    user's channel while at least one of that user's streams is open (the
    first stream subscribes, the last one to close unsubscribes: deliver.lua's
    PUBSUB NUMSUB sees the hub as the one listener). Each message is handed
    to the local streams it concerns: a user's, everyone's, or those of the
    platform's users. Subscriptions are batched: streams that open together
    share one SUBSCRIBE, and a stream says hello only once Redis confirmed
    its channel, so it misses nothing published after its version was read.

    A lost connection is retried with backoff; streams stay open meanwhile
    (heartbeats) and get a ``resync`` event once it is back, since anything
    published in between was lost. A second, small pool serves the hub's
    plain commands (versions, due broadcasts).
    """

    def __init__(self, factory: Callable[[], tuple[Any, Any]]) -> None:
        self._factory = factory
        self._users: dict[str, set[_Listener]] = {}
        self._all: set[_Listener] = set()
        self._platforms: dict[str, set[_Listener]] = {p: set() for p in ALL_PLATFORMS}
        self._broadcast: dict[str, str] = {keys.live_broadcast_channel(s): s for s in broadcast_scopes()}
        # User channels a SUBSCRIBE went out for on this connection (and no UNSUBSCRIBE since),
        # those Redis confirmed, and the confirmations still to come per channel.
        self._sent: set[str] = set()
        self._confirmed: set[str] = set()
        self._pending: dict[str, int] = {}
        self._ready: dict[str, asyncio.Future[None]] = {}
        self._dirty = asyncio.Event()
        self._pubsub: Any = None
        self._commands: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        # Version reads waiting for the next MGET, and the tasks reading them.
        self._versions: list[tuple[int, asyncio.Future[int]]] = []
        self._readers: set[asyncio.Task[None]] = set()
        self.connected = False

    # -- streams

    def start(self) -> None:
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._read(), name="live-hub-read"),
                asyncio.create_task(self._subscribe_loop(), name="live-hub-subscribe"),
                asyncio.create_task(self._due_loop(), name="live-hub-due"),
            ]

    async def join(self, listener: _Listener, channel: str) -> bool:
        """Register a stream; True once its user's channel is subscribed."""
        self.start()
        self._users.setdefault(channel, set()).add(listener)
        self._all.add(listener)
        for platform in listener.platforms:
            self._platforms[platform].add(listener)
        if channel in self._confirmed:
            return True
        ready = self._ready.get(channel)
        if ready is None:
            ready = self._ready[channel] = asyncio.get_running_loop().create_future()
            self._dirty.set()
        try:
            await asyncio.wait_for(asyncio.shield(ready), SUBSCRIBE_WAIT_SECONDS)
        except TimeoutError:
            return False
        return True

    def leave(self, listener: _Listener, channel: str) -> None:
        listener.closed = True
        self._all.discard(listener)
        for platform in listener.platforms:
            self._platforms[platform].discard(listener)
        listeners = self._users.get(channel)
        if listeners is not None:
            listeners.discard(listener)
            if not listeners:
                del self._users[channel]
                self._dirty.set()

    async def user_version(self, user_id: int) -> int:
        """The user's version, read with those of every stream opening in the
        same turn of the loop (one MGET; streams run on a single Redis only):
        a burst of streams takes one round trip, not one each queued on the
        command pool's four connections. Raises RedisError."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        self._versions.append((user_id, future))
        if len(self._versions) == 1:
            reader = loop.create_task(self._read_versions(), name="live-hub-versions")
            self._readers.add(reader)
            reader.add_done_callback(self._readers.discard)
        return await future

    async def _read_versions(self) -> None:
        await asyncio.sleep(0)  # the streams opening in this turn of the loop join the batch
        batch, self._versions = self._versions, []
        try:
            if self._commands is None:
                self._commands = self._factory()[1]
            values: list[Any] = []
            for i in range(0, len(batch), SUBSCRIBE_BATCH):
                part = batch[i : i + SUBSCRIBE_BATCH]
                values += await self._commands.mget([keys.live_user_version(user_id) for user_id, _ in part])
        except (RedisError, OSError) as error:
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        except BaseException:
            for _, future in batch:
                future.cancel()
            raise
        for (_, future), value in zip(batch, values, strict=True):
            if not future.done():
                future.set_result(int(value or 0))

    def stream_count(self) -> int:
        return len(self._all)

    def subscribed_users(self) -> int:
        return len(self._confirmed)

    # -- the connection

    async def _read(self) -> None:
        backoff = 0.1
        lost = False
        while True:
            try:
                await self._connect()
                if lost:
                    self._fan(self._all, RESYNC_EVENT)
                lost, backoff = False, 0.1
                await self._pump()
            except (RedisError, OSError):
                logger.warning("live hub: Redis pub/sub lost, reconnecting", exc_info=True)
            except asyncio.CancelledError:
                await self._drop()
                raise
            lost = True
            await self._drop()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, HUB_RECONNECT_MAX_SECONDS)

    async def _connect(self) -> None:
        client, commands = self._factory()
        self._commands = commands
        pubsub = client.pubsub()
        self._sent, self._confirmed, self._pending = set(), set(), {}
        await pubsub.subscribe(*self._broadcast)
        self._pubsub = pubsub
        self.connected = True
        self._dirty.set()  # every user channel with streams is subscribed again

    async def _drop(self) -> None:
        self.connected = False
        pubsub, self._pubsub = self._pubsub, None
        self._sent, self._confirmed, self._pending = set(), set(), {}
        if pubsub is not None:
            with suppress(Exception):
                await pubsub.aclose()

    async def _pump(self) -> None:
        pubsub = self._pubsub
        silent = 0.0
        while True:
            message = await pubsub.get_message(timeout=HUB_HEALTH_SECONDS)
            if message is None:
                silent += HUB_HEALTH_SECONDS
                if silent >= 2 * HUB_HEALTH_SECONDS:
                    raise ConnectionError("live hub: no answer to PING")
                await pubsub.ping()
                continue
            silent = 0.0
            # What else has already arrived goes out with it: a burst of events
            # (a bulk retraction, a backlog of due broadcasts) costs each stream
            # one write, not one per event.
            burst: list[tuple[str, bytes]] = []
            while message is not None:
                kind = message.get("type")
                if kind == "message":
                    data = message["data"]
                    burst.append((_text(message["channel"]), data if isinstance(data, bytes) else str(data).encode()))
                elif kind == "subscribe":
                    self._confirm(_text(message["channel"]))
                if len(burst) >= HUB_BURST:
                    break
                message = await pubsub.get_message(timeout=0)
            if burst:
                self._dispatch(burst)

    def _confirm(self, channel: str) -> None:
        left = self._pending.get(channel, 0) - 1
        if left > 0:
            self._pending[channel] = left
            return
        self._pending.pop(channel, None)
        if channel in self._sent:
            self._confirmed.add(channel)
            ready = self._ready.pop(channel, None)
            if ready is not None and not ready.done():
                ready.set_result(None)

    def _listeners(self, channel: str) -> Iterable[_Listener]:
        scope = self._broadcast.get(channel)
        if scope is None:
            return self._users.get(channel, ())
        if scope == BROADCAST_EVERYONE:
            return self._all
        return self._platforms.get(scope, ())

    def _dispatch(self, burst: list[tuple[str, bytes]]) -> None:
        """Hand the events (channel, data) to the streams they concern, in order."""
        if len(burst) == 1:
            channel, raw = burst[0]
            self._fan(self._listeners(channel), raw)
            return
        queued: dict[_Listener, list[bytes]] = {}
        for channel, raw in burst:
            for listener in self._listeners(channel):
                queued.setdefault(listener, []).append(raw)
        # Streams given the same events (all of them, for broadcasts) share one
        # frame: the events are told apart by identity, and live until the end.
        frames: dict[tuple[bytes, tuple[int, ...]], bytes] = {}

        def entries() -> Iterator[tuple[_Listener, Sequence[bytes], bytes]]:
            for listener, events in queued.items():
                key = (listener.event, tuple(map(id, events)))
                frame = frames.get(key)
                if frame is None:
                    frame = frames[key] = b"".join(_raw_frame(listener.event, raw) for raw in events)
                yield listener, events, frame

        _hand_out(entries())

    @staticmethod
    def _fan(listeners: Iterable[_Listener], raw: bytes) -> None:
        # One SSE frame per event name (every inbox stream shares one), the
        # same bytes written to every stream.
        frames: dict[bytes, bytes] = {}
        events = (raw,)

        def entries() -> Iterator[tuple[_Listener, Sequence[bytes], bytes]]:
            for listener in list(listeners):
                frame = frames.get(listener.event)
                if frame is None:
                    frame = frames[listener.event] = _raw_frame(listener.event, raw)
                yield listener, events, frame

        _hand_out(entries())

    async def _subscribe_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            pubsub = self._pubsub
            if pubsub is None:
                continue  # _connect sets the flag again once connected
            gone = [c for c in self._sent if c not in self._users]
            wanted = [c for c in self._users if c not in self._sent]
            try:
                if gone:
                    self._sent.difference_update(gone)
                    self._confirmed.difference_update(gone)
                    for channel in gone:
                        # A stream of that user arriving later waits for a new confirmation.
                        self._ready.pop(channel, None)
                    await pubsub.unsubscribe(*gone)
                for i in range(0, len(wanted), SUBSCRIBE_BATCH):
                    batch = wanted[i : i + SUBSCRIBE_BATCH]
                    self._sent.update(batch)
                    for channel in batch:
                        self._pending[channel] = self._pending.get(channel, 0) + 1
                    await pubsub.subscribe(*batch)
            except (RedisError, OSError):
                # The reader notices the same connection failing and reconnects.
                logger.warning("live hub: subscribe failed", exc_info=True)

    async def _due_loop(self) -> None:
        script = None
        while True:
            delay = DUE_TICK_SECONDS
            try:
                if self._commands is not None:
                    if script is None:
                        script = self._commands.register_script(DUE_SCRIPT.source)
                    now = int(time.time() * 1000)
                    published, following = await script(keys=[keys.live_due()], args=[now, DUE_BATCH])
                    if int(published) >= DUE_BATCH:
                        delay = 0.0
                    elif following:
                        delay = min(delay, max(0.01, (int(following) - now) / 1000))
            except (RedisError, OSError):
                logger.debug("live hub: due broadcasts not published", exc_info=True)
            await asyncio.sleep(delay)

    async def close(self) -> None:
        """Stop the hub's tasks and its command pool. A cancellation that lands
        inside a library call can be swallowed there (seen mid UNSUBSCRIBE:
        the loop then waits for work again), so a task still running after a
        moment is cancelled again, a few times, and then left behind with a
        warning: a server's shutdown never waits on it forever."""
        tasks, self._tasks = [*self._tasks, *self._readers], []
        for _ in range(HUB_CLOSE_ROUNDS):
            if not tasks:
                break
            for task in tasks:
                task.cancel()
            _, pending = await asyncio.wait(tasks, timeout=HUB_CLOSE_WAIT_SECONDS)
            for task in tasks:
                if task.done() and not task.cancelled():
                    task.exception()  # retrieved: its error was logged where it happened
            tasks = list(pending)
        if tasks:
            logger.warning("live hub: %d task(s) ignored cancellation; left behind", len(tasks))
        if self._commands is not None:
            with suppress(Exception):
                await self._commands.aclose()
            self._commands = None


def _async_client() -> tuple[Any, Any]:
    """The hub's pub/sub client and its plain-command client."""
    if settings.REDIS_EMBEDDED:
        # fakeredis is the embedded default's server, not a dependency of a
        # deployment: imported only when the embedded default runs (listed in
        # pyproject.toml under [tool.check_imports]).
        from fakeredis import aioredis

        from core.embedded import SERVER

        return aioredis.FakeRedis(server=SERVER), aioredis.FakeRedis(server=SERVER)
    # The server (and db) the read model uses. No retries inside redis-py: the
    # hub reconnects itself, subscribes again and tells its streams to resync.
    # No socket timeout on the subscriber: it waits for events as long as it must.
    url = settings.CACHES["default"]["LOCATION"]
    timeout = settings.REDIS_SOCKET_TIMEOUT
    pubsub = redis.asyncio.Redis.from_url(
        url,
        socket_connect_timeout=timeout,
        retry=AsyncRetry(NoBackoff(), 0),
        # Named per process: CLIENT LIST tells each process's one subscriber apart.
        client_name=f"{HUB_CLIENT_NAME}-{os.getpid()}",
    )
    pool = redis.asyncio.BlockingConnectionPool.from_url(
        url,
        max_connections=4,
        timeout=timeout * 4,
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        retry=AsyncRetry(NoBackoff(), 0),
        client_name=f"{HUB_CLIENT_NAME}-commands-{os.getpid()}",
    )
    return pubsub, redis.asyncio.Redis(connection_pool=pool)


_hubs: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LiveHub]" = weakref.WeakKeyDictionary()


def hub() -> LiveHub:
    """The running event loop's hub (one per uvicorn worker; tests run several loops)."""
    loop = asyncio.get_running_loop()
    found = _hubs.get(loop)
    if found is None:
        found = _hubs[loop] = LiveHub(_async_client)
    return found


async def hub_close() -> None:
    """Stop the running loop's hub (tests, shutdown)."""
    found = _hubs.pop(asyncio.get_running_loop(), None)
    if found is not None:
        await found.close()


class EventStream:
    """One stream on an event loop (ASGI), served by the loop's hub: no thread,
    no connection of its own. ``serve`` writes it through an ASGI sink (the
    stream's own route; the hub then writes events itself), or iterate it for
    the SSE bytes (Django's streaming response); ``close`` (the client went
    away) ends it at once. A stream whose channel cannot be subscribed (Redis
    unreachable) ends at once with a longer retry hint and the page polls
    meanwhile."""

    __slots__ = ("_channel", "_event", "_listener", "_user_id")

    def __init__(self, *, user_id: int, event: str, platforms: Iterable[str] = ()) -> None:
        self._user_id = user_id
        self._event = event.encode()
        self._channel = keys.live_user_channel(user_id)
        self._listener = _Listener(frozenset(stream_scopes(platforms)) - {BROADCAST_EVERYONE}, self._event)

    def close(self) -> None:
        self._listener.closed = True
        self._listener.wake()

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._run()

    async def _start(self, central: LiveHub) -> bytes | None:
        """The opening (retry hint and hello), or None when the stream cannot start."""
        if not await central.join(self._listener, self._channel):
            return None
        try:
            version = await central.user_version(self._user_id)
        except (RedisError, OSError):
            return None
        return _opening(version)

    def _pending(self) -> bytes:
        frames, self._listener.frames = self._listener.frames, []
        return b"".join(_raw_frame(self._event, data) for data in frames)

    async def serve(self, sink: Sink, direct: DirectWrite | None = None) -> None:
        """Write the stream through ``sink`` until it ends (its cap, or ``close``).

        After the opening the hub writes each event itself while the stream is
        idle: straight to the socket when the server gives ``direct`` (see
        ``DirectWrite``), else through the sink (``_Listener.offer``); this
        task writes only the heartbeats, what queued while it was busy, and
        the rest of a write the client was too slow to take at once.
        """
        central = hub()
        listener = self._listener
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _stream_seconds()
        heartbeat = _heartbeat_seconds()
        metrics.LIVE_STREAMS.inc()
        try:
            opening = await self._start(central)
            if opening is None:
                await sink(_unavailable())
                return
            await sink(opening)
            listener.sink = sink
            listener.direct = direct
            while (remaining := deadline - loop.time()) > 0 and not listener.closed:
                if listener.stalled is not None:
                    (pending, waiting), listener.stalled = listener.stalled, None
                    listener.busy = True
                    try:
                        await _finish(pending, waiting)
                    finally:
                        listener.busy = False
                elif listener.frames:
                    listener.busy = True
                    try:
                        await sink(self._pending())
                    finally:
                        listener.busy = False
                else:
                    writes = listener.writes
                    await listener.wait(min(heartbeat, remaining))
                    # A heartbeat only after a quiet wait: the hub's writes do not wake this task.
                    quiet = listener.writes == writes and listener.stalled is None
                    if quiet and not listener.frames and not listener.closed:
                        listener.busy = True
                        try:
                            await sink(HEARTBEAT)
                        finally:
                            listener.busy = False
        finally:
            listener.sink = None
            listener.direct = None
            stalled, listener.stalled = listener.stalled, None
            if stalled is not None and isinstance(stalled[0], Coroutine):
                stalled[0].close()
            central.leave(listener, self._channel)
            metrics.LIVE_STREAMS.dec()

    async def _run(self) -> AsyncIterator[bytes]:
        central = hub()
        listener = self._listener
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _stream_seconds()
        heartbeat = _heartbeat_seconds()
        metrics.LIVE_STREAMS.inc()
        try:
            opening = await self._start(central)
            if opening is None:
                yield _unavailable()
                return
            yield opening
            while (remaining := deadline - loop.time()) > 0 and not listener.closed:
                if not listener.frames:
                    await listener.wait(min(heartbeat, remaining))
                if listener.frames:
                    yield self._pending()
                elif not listener.closed:
                    yield HEARTBEAT
        finally:
            central.leave(listener, self._channel)
            metrics.LIVE_STREAMS.dec()


def event_stream_async(*, user_id: int, event: str, platforms: Iterable[str] = ()) -> AsyncIterator[bytes]:
    """The user's stream on an event loop (see ``EventStream``)."""
    return aiter(EventStream(user_id=user_id, event=event, platforms=platforms))
