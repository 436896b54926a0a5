"""Live updates of a user's inbox: a version counter and a pub/sub channel per user.

Writers call ``inbox_changed`` after their Redis write succeeded; it bumps
each user's version and publishes ``{"v": version, "reason": ...}`` on the
user's channel (one small script per user: one round trip). The push fan-out
does the same inside its own script (messagecenter/lua/deliver.lua).
Publishing is best effort: a failure is logged and never fails the write
(the polling fallback still sees the new version, or the new counts once
Redis is back).

Readers: ``counts_etag`` (the counts endpoint answers 304 while it is
unchanged), ``subscribe`` (a blocking pub/sub for WSGI workers) and
``subscribe_async`` (redis.asyncio, for ASGI servers).
"""

import json
import logging
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from django.conf import settings
from redis.exceptions import RedisError

from core import keys
from core.lua import LuaScript
from core.platforms import ALL_PLATFORMS
from core.redis import get_redis, is_cluster

logger = logging.getLogger(__name__)

SCRIPT = LuaScript(__file__, "../lua/live.lua")

# Time-driven changes (an item expiring, a scheduled announcement going live)
# bump no counter; the ETag therefore also carries a time bucket, which bounds
# how long a 304 can hide such a change.
ETAG_TIME_BUCKET_MS = 60_000


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
    """An event is ``head + version + tail``: the fan-out script (deliver.lua)
    builds each recipient's event from these, so both writers send the same JSON."""
    return '{"v":', ',"reason":' + json.dumps(reason) + "}"


def user_version(*, user_id: int) -> int:
    raw = get_redis().get(keys.live_user_version(user_id))
    return int(raw or 0)


def counts_etag(*, user_id: int, now_ms: int) -> str:
    """A weak ETag that changes whenever the user's counts can have changed.

    Besides the user's own version it takes in the global markers that make
    every inbox merge or settle (removals, pull items, bulletin edits and
    display times passing) and the announcement index revisions, all read in
    one pipeline; no SQL, no Lua.
    """
    client = get_redis()
    pipe = client.pipeline(transaction=False)
    pipe.get(keys.live_user_version(user_id))
    pipe.get(keys.mc_removed_version())
    pipe.get(keys.mc_pull_sequence())
    pipe.get(keys.mc_bulletin_update_time())
    pipe.zrevrangebyscore(keys.mc_bulletin_config(), now_ms, "-inf", start=0, num=1, withscores=True)
    for platform in ALL_PLATFORMS:
        pipe.get(keys.notice_revision(platform))
    replies = pipe.execute()
    latest = replies[4]
    parts = [
        _text(replies[0]),
        _text(replies[1]),
        _text(replies[2]),
        _text(replies[3]),
        str(int(latest[0][1])) if latest else "0",
        *(_text(r) for r in replies[5:]),
        str(now_ms // ETAG_TIME_BUCKET_MS),
    ]
    return f'W/"{user_id}.{"-".join(parts)}"'


def _text(value: Any) -> str:
    if value is None:
        return "0"
    return value.decode() if isinstance(value, bytes) else str(value)


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
        from fakeredis import aioredis

        from core.embedded import SERVER

        return aioredis.FakeRedis(server=SERVER)
    import redis.asyncio

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
