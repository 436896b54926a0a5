"""Live updates: a version counter and a pub/sub channel per user, and the
server-sent event stream that forwards the channel to an open page.

The transport knows no app. Writers call ``inbox_changed`` after their Redis
write succeeded; it bumps each user's version and publishes
``{"v": version, "reason": ...}`` on the user's channel (one small script per
user: one round trip). A fan-out script may do the same inside its own call
(``event_parts``). Publishing is best effort: a failure is logged and never
fails the write (the polling fallback still sees the new version, or the new
counts once Redis is back).

Readers: ``user_version``, ``subscribe`` (a blocking pub/sub for WSGI
workers), ``subscribe_async`` (redis.asyncio, for ASGI servers) and the two
flavours of ``event_stream`` built on them. A stream lives at most
``MESSAGECENTER_LIVE_STREAM_SECONDS`` and sends a comment line every
``MESSAGECENTER_LIVE_HEARTBEAT_SECONDS``: the heartbeat lets a server notice
a closed connection, and the cap hands a WSGI worker thread back (the browser
reconnects after the ``retry`` hint). Django buffers an iterator of the other
flavour whole, which would defeat streaming: WSGI gets the blocking one, ASGI
the async one.
"""

import json
import logging
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import redis.asyncio
from asgiref.sync import sync_to_async
from django.conf import settings
from redis.exceptions import RedisError

from core import keys, metrics
from core.lua import LuaScript
from core.redis import get_redis, is_cluster

logger = logging.getLogger(__name__)

SCRIPT = LuaScript(__file__, "lua/live.lua")

RETRY_MS = 3000
HEARTBEAT = b": keepalive\n\n"


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


def user_version(*, user_id: int) -> int:
    raw = get_redis().get(keys.live_user_version(user_id))
    return int(raw or 0)


def available() -> bool:
    """Pub/sub streams need a single Redis server: on a cluster pages poll instead."""
    return not is_cluster()


@contextmanager
def subscribe(*, user_id: int) -> Iterator[Any]:
    """A blocking pub/sub on the user's channel (``get_message(timeout=...)``)."""
    pubsub = get_redis().pubsub(ignore_subscribe_messages=True)
    try:
        pubsub.subscribe(keys.live_user_channel(user_id))
        yield pubsub
    finally:
        pubsub.close()


def _async_client() -> Any:
    if settings.REDIS_EMBEDDED:
        # fakeredis is the embedded default's server, not a dependency of a
        # deployment: imported only when the embedded default runs (listed in
        # pyproject.toml under [tool.check_imports]).
        from fakeredis import aioredis

        from core.embedded import SERVER

        return aioredis.FakeRedis(server=SERVER)
    # The server (and db) the read model uses; its own connection, since a
    # subscribed connection cannot serve other commands.
    url = settings.CACHES["default"]["LOCATION"]
    return redis.asyncio.from_url(url, socket_connect_timeout=settings.REDIS_SOCKET_TIMEOUT)


@asynccontextmanager
async def subscribe_async(*, user_id: int) -> AsyncIterator[Any]:
    """The same as ``subscribe`` for an event loop (ASGI): ``await get_message(timeout=...)``."""
    client = _async_client()
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    try:
        await pubsub.subscribe(keys.live_user_channel(user_id))
        yield pubsub
    finally:
        await pubsub.aclose()
        await client.aclose()


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


def _opening(version: int) -> bytes:
    # The version lets a page that reconnects refresh once if it missed events.
    return f"retry: {RETRY_MS}\n\n".encode() + sse_frame("hello", {"v": version})


def _stream_seconds() -> float:
    return float(settings.MESSAGECENTER_LIVE_STREAM_SECONDS)


def _heartbeat_seconds() -> float:
    return float(settings.MESSAGECENTER_LIVE_HEARTBEAT_SECONDS)


def event_stream(*, user_id: int, event: str) -> Iterator[bytes]:
    """Blocking stream (WSGI) of the user's events, each sent as an SSE ``event``.

    Subscribes before reading the version, so no event falls in between.
    """
    deadline = time.monotonic() + _stream_seconds()
    heartbeat = _heartbeat_seconds()
    with subscribe(user_id=user_id) as pubsub, metrics.LIVE_STREAMS.track_inprogress():
        yield _opening(user_version(user_id=user_id))
        while (remaining := deadline - time.monotonic()) > 0:
            message = pubsub.get_message(timeout=min(heartbeat, remaining))
            data = decode_event(message)
            yield HEARTBEAT if data is None else sse_frame(event, data)


async def event_stream_async(*, user_id: int, event: str) -> AsyncIterator[bytes]:
    """The same stream on an event loop (ASGI): no thread is held while it waits."""
    deadline = time.monotonic() + _stream_seconds()
    heartbeat = _heartbeat_seconds()
    async with subscribe_async(user_id=user_id) as pubsub:
        with metrics.LIVE_STREAMS.track_inprogress():
            version = await sync_to_async(user_version, thread_sensitive=False)(user_id=user_id)
            yield _opening(version)
            while (remaining := deadline - time.monotonic()) > 0:
                message = await pubsub.get_message(timeout=min(heartbeat, remaining))
                data = decode_event(message)
                yield HEARTBEAT if data is None else sse_frame(event, data)
