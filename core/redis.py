"""The one place that hands out the Redis connection of the read model.

Normally that is django-redis's ``default`` alias (real Redis, or the embedded
fakeredis server). When ``MESSAGECENTER_REDIS_CLUSTER_URL`` is set the read
model talks to a Redis Cluster through redis-py's ``RedisCluster`` instead:
django-redis's client cannot follow cluster redirects (it fails with MovedError).
"""

import asyncio
import math
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cache
from typing import Any

import hiredis
import redis.asyncio
from django.conf import settings
from django_redis import get_redis_connection
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from core import breaker, keys

RedisClient = Any  # redis.Redis | redis.cluster.RedisCluster; both speak the same commands


# Not bounded like the single server's pool (config/settings/base.py): on a
# ConnectionError, which is what a blocking pool raises when no connection is
# free in time, redis-py's cluster client disconnects the node's free
# connections and reloads the cluster's topology, so an overload would turn
# into a storm of reconnections. Each node's pool grows with the threads.
@cache
def _cluster_client(url: str) -> RedisCluster:
    timeout = settings.REDIS_SOCKET_TIMEOUT
    return RedisCluster.from_url(
        url,
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        retry=Retry(NoBackoff(), 1),
    )


def get_redis() -> RedisClient:
    """Return the read model's Redis client (thread-safe, pooled)."""
    cluster_url = settings.MESSAGECENTER_REDIS_CLUSTER_URL
    if cluster_url:
        return _cluster_client(cluster_url)
    return get_redis_connection("default")


def is_cluster() -> bool:
    return bool(settings.MESSAGECENTER_REDIS_CLUSTER_URL)


def round_trip(client: RedisClient, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """Send ``commands`` in one write on a pooled connection of a single Redis
    and read one reply each: one round trip without redis-py's pipeline
    machinery (its command stack and per-command response callbacks), for
    hot paths whose replies are plain. Replies come back raw (bytes, ints,
    lists); an error reply is raised once every reply has been read, so the
    connection stays in step and goes back to the pool.
    """
    packed = [hiredis.pack_command(tuple(command)) for command in commands]
    pool = client.connection_pool
    connection = pool.get_connection()
    replies: list[Any] = []
    try:
        connection.send_packed_command(packed)
        for _ in packed:
            try:
                replies.append(connection.read_response())
            except ResponseError as exc:
                replies.append(exc)
    except BaseException:
        connection.disconnect()  # replies may be left unread
        raise
    finally:
        pool.release(connection)
    for reply in replies:
        if isinstance(reply, ResponseError):
            raise reply
    return replies


# One async client per event loop (an asyncio pool binds to the loop that made
# it): the read model's server and db, no retries inside redis-py (a caller
# that meets an error lets the sync path answer, which has the breaker and the
# fallbacks), the sync pool's timeouts. Its own small bound
# (ASGI_FAST_READS_CONNECTIONS): one loop's calls hold a connection for one
# round trip each, so a few serve it, and the process's connections stay
# bounded (a call that finds them all busy past the wait goes the sync way).
_async_clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, redis.asyncio.Redis]" = (
    weakref.WeakKeyDictionary()
)


def async_available() -> bool:
    """Whether the read model has an async client: a single real Redis (the
    embedded fakeredis lives in this process's threads; a cluster needs
    redis-py's cluster client, which the hot async reads do not use)."""
    return not is_cluster() and not settings.REDIS_EMBEDDED


def get_async_redis() -> redis.asyncio.Redis:
    """The running event loop's client of the read model's Redis (``async_available`` first).

    Its connections have no socket timeout of their own: ``round_trip_async``
    puts one deadline on a whole round trip. redis-py's, on every write and
    every reply, schedules and cancels a timer for each and runs each write
    as a task of its own, a quarter of a polled page's round trip in CPU."""
    loop = asyncio.get_running_loop()
    client = _async_clients.get(loop)
    if client is None:
        timeout = settings.REDIS_SOCKET_TIMEOUT
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            settings.CACHES["default"]["LOCATION"],
            max_connections=int(settings.ASGI_FAST_READS_CONNECTIONS),
            timeout=timeout,
            socket_connect_timeout=timeout,
            socket_timeout=None,
        )
        client = _async_clients[loop] = redis.asyncio.Redis(connection_pool=pool)
    return client


@dataclass
class Ahead:
    """Commands that ride ahead of the next round trip a task makes on the
    event loop's client (``round_trip_async``, inside ``sent_ahead``): the
    fast route's throttle count goes in the same write as a handler's first
    commands instead of a round trip of its own. ``check`` sees their replies
    before that round trip's own are returned and may raise to stop the
    caller there (a refusal: the task's later round trips never happen)."""

    commands: Sequence[Sequence[Any]]
    check: Callable[[list[Any]], None]
    taken: bool = False
    replies: list[Any] | None = None  # theirs (error replies as exceptions), once sent


_ahead: ContextVar[Ahead | None] = ContextVar("round_trip_ahead", default=None)


@contextmanager
def sent_ahead(ahead: Ahead) -> Iterator[Ahead]:
    """Within this block, ``ahead``'s commands go with the task's next round trip."""
    token = _ahead.set(ahead)
    try:
        yield ahead
    finally:
        _ahead.reset(token)


async def round_trip_async(commands: Sequence[Sequence[Any]]) -> list[Any]:
    """``round_trip`` on the event loop's client: ``commands`` in one write,
    one raw reply each, an error reply raised once every reply has been read
    (and the commands of an ``Ahead`` waiting for this round trip checked)."""
    ahead = _ahead.get()
    if ahead is not None and not ahead.taken:
        ahead.taken = True
        commands = [*ahead.commands, *commands]
    else:
        ahead = None  # none waits, or an earlier round trip took it
    packed = [hiredis.pack_command(tuple(command)) for command in commands]
    pool = get_async_redis().connection_pool
    connection = await pool.get_connection()
    replies: list[Any] = []
    try:
        # One deadline for the write and every reply (the connections have
        # no socket timeout: see get_async_redis).
        async with asyncio.timeout(settings.REDIS_SOCKET_TIMEOUT):
            await connection.send_packed_command(packed)
            for _ in packed:
                try:
                    replies.append(await connection.read_response(timeout=math.inf))
                except ResponseError as exc:
                    replies.append(exc)
    except TimeoutError as exc:
        await connection.disconnect()  # replies may be left unread
        raise RedisTimeoutError(f"no reply from Redis within {settings.REDIS_SOCKET_TIMEOUT} s") from exc
    except BaseException:
        await connection.disconnect()  # replies may be left unread
        raise
    finally:
        await pool.release(connection)
        # Done (or failed on the way): a held answer (core.tracking) needs a
        # barrier before it is served again.
        breaker.traffic.commands_done += len(packed)
    if ahead is not None:
        carried = len(ahead.commands)
        ahead.replies, replies = replies[:carried], replies[carried:]
        ahead.check(ahead.replies)
    for reply in replies:
        if isinstance(reply, ResponseError):
            raise reply
    return replies


def keyspace_flush() -> None:
    """Delete the read model's whole keyspace: FLUSHDB on a single Redis, and
    on a Redis Cluster only the keys under ``MESSAGECENTER_KEY_PREFIX``.

    For tests and the benchmark, which own their Redis database. A cluster has
    one database that every run beside this one shares, so FLUSHDB there would
    wipe their keys too. Keys go one DEL each: a node refuses a multi-key DEL
    across hash slots even when it holds them all.
    """
    client = get_redis()
    if not isinstance(client, RedisCluster):
        client.flushdb()
        return
    pattern = f"{keys.prefix()}*"
    for node in client.get_primaries():
        node_client = client.get_redis_connection(node)
        pipe = node_client.pipeline(transaction=False)
        for key in node_client.scan_iter(match=pattern, count=1000):
            pipe.delete(key)
        pipe.execute()
