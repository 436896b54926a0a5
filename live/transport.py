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
``LiveHub``: one redis.asyncio pub/sub connection, subscribed once to the
broadcast channels and to each user channel while a stream of that user is
open, that puts each event's SSE frame on the bounded queue of every local
stream it concerns (``event_stream_async``); each stream's own task sends
its frames through Django's streaming response, so every byte goes out
through the server's ASGI ``send``. A stream holds its queue and no
connection. Under WSGI each stream keeps its own blocking pub/sub
(``event_stream``; a worker thread per stream cannot scale anyway).
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
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import redis.asyncio
from django.conf import settings
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from accounts.platforms import ALL_PLATFORMS
from core.lua import LuaScript
from core.redis import get_redis, is_cluster
from insight import metrics
from live import keys as live_keys

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
# Events the hub takes from its connection in one go when they arrived
# together; past that it hands them out before it reads on.
HUB_BURST = 256
# Events a stream holds while its client does not read; past that the stream
# is dropped with one "resync" event (the page reconnects and refetches).
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
        SCRIPT.stream(calls, client=client)  # one connection, no SCRIPT EXISTS round trip first
    except RedisError:
        logger.warning("live update for %d user(s) not published", len(calls), exc_info=True)


def changed_calls(*, user_ids: Iterable[int], reason: str) -> list[tuple[list[str], list[Any]]]:
    """live.lua's (keys, args) per user: ``inbox_changed`` runs them, a writer
    that wants them in its own pipeline queues them (``SCRIPT.queue``)."""
    publish = available()  # no streams on a cluster (pages poll): the versions are what counts
    head, tail = event_parts(reason)
    return [
        ([live_keys.user_version(int(user_id))], [live_keys.user_channel(int(user_id)) if publish else "", head, tail])
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
    return live_keys.broadcast_channel(scope), broadcast_event(scope=scope, reason=reason, ref=ref)


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
            client.zadd(live_keys.due(), {f"{channel}\n{event}": int(at_ms)})
        else:
            client.publish(channel, event)
    except RedisError:
        logger.warning("live broadcast %s/%s not published", scope, reason, exc_info=True)


def broadcast_cancel(*, scope: str, reason: str, ref: str) -> None:
    """Drop a broadcast still waiting for its time (its item is gone); never raises."""
    if not available():
        return
    member = f"{live_keys.broadcast_channel(scope)}\n{broadcast_event(scope=scope, reason=reason, ref=ref)}"
    try:
        get_redis().zrem(live_keys.due(), member)
    except RedisError:
        logger.warning("live broadcast %s/%s not cancelled", scope, reason, exc_info=True)


def due_publish(*, now_ms: int | None = None) -> int | None:
    """Publish the broadcast events whose time has come; returns when the next
    one is due (ms), None when none waits. Raises RedisError."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    client = get_redis()
    while True:
        published, following = DUE_SCRIPT([live_keys.due()], [now, DUE_BATCH], client=client)
        if int(published) < DUE_BATCH:
            return int(following) if following else None


# --- readers ----------------------------------------------------------------------


def user_version(*, user_id: int) -> int:
    raw = get_redis().get(live_keys.user_version(user_id))
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
        pubsub.subscribe(live_keys.user_channel(user_id), *(live_keys.broadcast_channel(s) for s in scopes))
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


# Sent to every stream of a hub that lost its connection and got it back, and
# as the last event of a stream dropped for falling behind: events may have
# been missed, refetch everything.
RESYNC_EVENT = json.dumps({"reason": "resync", "spread": BROADCAST_SPREAD_MS}, separators=(",", ":")).encode()


class _Stream:
    """One open stream's place in its hub: the SSE frames waiting for it, at
    most ``STREAM_BACKLOG`` of them. The hub only ever puts without waiting,
    so a client that stopped reading costs the others nothing: once its queue
    is full the hub drops it (``dropped``), and the stream ends with a
    ``resync`` event (the page reconnects and refetches)."""

    __slots__ = ("active", "channel", "deadline", "dropped", "ended", "event", "platforms", "queue")

    def __init__(self, *, channel: str, platforms: frozenset[str], event: bytes, now: float, seconds: float) -> None:
        self.channel = channel
        self.platforms = platforms
        self.event = event
        self.queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=STREAM_BACKLOG)
        self.dropped = False
        # When the hub last gave it something (an event, a heartbeat), and when
        # it ends (its cap): the hub's tick keeps both, so the stream's own wait
        # needs no timer (re-arming one per event doubled a broadcast's cost).
        self.active = now
        self.deadline = now + seconds
        self.ended = False


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
        self._users: dict[str, set[_Stream]] = {}
        self._all: set[_Stream] = set()
        self._platforms: dict[str, set[_Stream]] = {p: set() for p in ALL_PLATFORMS}
        self._broadcast: dict[str, str] = {live_keys.broadcast_channel(s): s for s in broadcast_scopes()}
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
                asyncio.create_task(self._tick_loop(), name="live-hub-tick"),
            ]

    async def join(self, stream: _Stream) -> bool:
        """Register a stream; True once its user's channel is subscribed."""
        self.start()
        channel = stream.channel
        self._users.setdefault(channel, set()).add(stream)
        self._all.add(stream)
        for platform in stream.platforms:
            self._platforms[platform].add(stream)
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

    def leave(self, stream: _Stream) -> None:
        self._all.discard(stream)
        for platform in stream.platforms:
            self._platforms[platform].discard(stream)
        streams = self._users.get(stream.channel)
        if streams is not None:
            streams.discard(stream)
            if not streams:
                del self._users[stream.channel]
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
                values += await self._commands.mget([live_keys.user_version(user_id) for user_id, _ in part])
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
                    self._dispatch([(live_keys.broadcast_channel(BROADCAST_EVERYONE), RESYNC_EVENT)])
                lost, backoff = False, 0.1
                await self._pump()
            except (RedisError, OSError):
                logger.warning("live hub: Redis pub/sub lost, reconnecting", exc_info=True)
            except asyncio.CancelledError:
                await self._drop()
                raise
            except Exception:
                # Anything else would end this task and leave every stream of
                # the process deaf until a restart: log it and start over.
                logger.exception("live hub: reader failed, reconnecting")
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

    def _audience(self, channel: str) -> Iterable[_Stream]:
        scope = self._broadcast.get(channel)
        if scope is None:
            return self._users.get(channel, ())
        if scope == BROADCAST_EVERYONE:
            return self._all
        return self._platforms.get(scope, ())

    def _dispatch(self, burst: list[tuple[str, bytes]]) -> None:
        """Queue the events (channel, data) for the streams they concern, in
        order. Each event's SSE frame is built once per event name and the same
        bytes go to every stream; the streams' own tasks send them (through
        the server's ``send``), so this loop only appends to queues."""
        dropped: list[_Stream] = []
        now = asyncio.get_running_loop().time()
        for channel, raw in burst:
            frames: dict[bytes, bytes] = {}
            for stream in self._audience(channel):
                if stream.dropped:
                    continue
                frame = frames.get(stream.event)
                if frame is None:
                    frame = frames[stream.event] = _raw_frame(stream.event, raw)
                stream.active = now
                try:
                    stream.queue.put_nowait(frame)
                except asyncio.QueueFull:
                    # A client that stopped reading: it is told to resync and
                    # reconnect rather than make anyone wait or hold more memory.
                    stream.dropped = True
                    dropped.append(stream)
        for stream in dropped:
            self.leave(stream)
        if dropped:
            metrics.LIVE_DROPPED.inc(len(dropped))

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

    async def _tick_loop(self) -> None:
        """Heartbeats and caps of every stream, a few times per heartbeat: a
        stream given nothing for a heartbeat's length gets the keepalive
        comment, a stream past its cap ends (an empty frame wakes it)."""
        loop = asyncio.get_running_loop()
        while True:
            heartbeat = _heartbeat_seconds()
            await asyncio.sleep(min(1.0, max(0.05, heartbeat / 4)))
            now = loop.time()
            for stream in self._all:
                if now >= stream.deadline:
                    stream.ended = True
                    with suppress(asyncio.QueueFull):
                        stream.queue.put_nowait(b"")
                elif now - stream.active >= heartbeat:
                    stream.active = now
                    with suppress(asyncio.QueueFull):
                        stream.queue.put_nowait(HEARTBEAT)

    async def _due_loop(self) -> None:
        script = None
        while True:
            delay = DUE_TICK_SECONDS
            try:
                if self._commands is not None:
                    if script is None:
                        script = self._commands.register_script(DUE_SCRIPT.source)
                    now = int(time.time() * 1000)
                    published, following = await script(keys=[live_keys.due()], args=[now, DUE_BATCH])
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


async def event_stream_async(*, user_id: int, event: str, platforms: Iterable[str] = ()) -> AsyncIterator[bytes]:
    """The user's stream on an event loop (ASGI), served by the loop's hub: no
    thread and no connection of its own, only a bounded queue the hub fills.
    Its bytes go out through the server's ASGI ``send`` (Django's streaming
    response); a client that goes away ends it there (the generator is closed).

    Opens with the retry hint and ``hello`` once the user's channel is
    subscribed (so nothing published after the version was read is missed);
    a stream that cannot start (Redis unreachable) sends ``unavailable`` with
    a longer retry hint and ends, and the page polls meanwhile.
    """
    central = hub()
    stream = _Stream(
        channel=live_keys.user_channel(user_id),
        platforms=frozenset(stream_scopes(platforms)) - {BROADCAST_EVERYONE},
        event=event.encode(),
        now=asyncio.get_running_loop().time(),
        seconds=_stream_seconds(),
    )
    queue = stream.queue
    metrics.LIVE_STREAMS.inc()
    try:
        version = None
        if await central.join(stream):
            with suppress(RedisError, OSError):
                version = await central.user_version(user_id)
        if version is None:
            yield _unavailable()
            return
        yield _opening(version)
        while not stream.ended:
            frame = await queue.get()
            if stream.dropped:
                yield _raw_frame(stream.event, RESYNC_EVENT)
                return
            if not queue.empty():
                # What queued while this stream was sending goes out as one chunk.
                frames = [frame]
                while not queue.empty():
                    frames.append(queue.get_nowait())
                frame = b"".join(frames)
            if frame:
                yield frame
    finally:
        central.leave(stream)
        metrics.LIVE_STREAMS.dec()
