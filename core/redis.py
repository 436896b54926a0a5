"""The one place that hands out the Redis connection of the read model.

Normally that is django-redis's ``default`` alias (real Redis, or the embedded
fakeredis server). When ``MESSAGECENTER_REDIS_CLUSTER_URL`` is set the read
model talks to a Redis Cluster through redis-py's ``RedisCluster`` instead:
django-redis's client cannot follow cluster redirects (it fails with MovedError).
"""

import asyncio
import math
import weakref
from collections import deque
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

from core import keys

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


# One small pool per event loop (asyncio connections bind to the loop that
# made them): the read model's server and db, no retries inside redis-py (a
# caller that meets an error lets the sync path answer, which has the breaker
# and the fallbacks). Its own small bound (ASGI_FAST_READS_CONNECTIONS): one
# loop's calls hold a connection for one round trip each, so a few serve it,
# and the process's connections stay bounded (a call that finds them all busy
# waits within its round trip's deadline, then goes the sync way).
_async_pools: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopPool]" = weakref.WeakKeyDictionary()


def async_available() -> bool:
    """Whether the read model has an async client: a single real Redis (the
    embedded fakeredis lives in this process's threads; a cluster needs
    redis-py's cluster client, which the hot async reads do not use)."""
    return not is_cluster() and not settings.REDIS_EMBEDDED


class LoopPool:
    """At most ``size`` connections of one event loop, handed out in turn.

    redis-py's blocking pool takes a lock, a timer and a look at the socket
    for every connection it hands out, and records metrics on the way. Here a connection goes back
    only in step (``round_trip_async`` reads every reply, or disconnects it
    first, and a disconnected one connects again when next used), so taking
    one is a list pop. One a server closed while it sat idle fails its next
    round trip, whose caller lets the sync path answer; it connects again after.
    """

    def __init__(self, make: Callable[[], redis.asyncio.Connection], size: int) -> None:
        self._make = make
        self._size = size
        self._made = 0
        self._idle: list[redis.asyncio.Connection] = []
        self._waiters: deque[asyncio.Future[redis.asyncio.Connection]] = deque()

    async def get_connection(self) -> redis.asyncio.Connection:
        if self._idle:
            return self._idle.pop()
        if self._made < self._size:
            self._made += 1
            return self._make()
        waiter: asyncio.Future[redis.asyncio.Connection] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except BaseException:
            # Cancelled (the deadline) just as a connection was handed over: pass it on.
            if waiter.done() and not waiter.cancelled():
                self.release(waiter.result())
            raise

    def release(self, connection: redis.asyncio.Connection) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():  # a waiter whose deadline passed is skipped
                waiter.set_result(connection)
                return
        self._idle.append(connection)


def get_async_pool() -> LoopPool:
    """The running event loop's connections to the read model's Redis (``async_available`` first).

    They have no socket timeout of their own: ``round_trip_async`` puts one
    deadline on a whole round trip, where redis-py's socket timeout armed a
    timer for every reply and ran every write as a task of its own."""
    loop = asyncio.get_running_loop()
    pool = _async_pools.get(loop)
    if pool is None:
        factory = redis.asyncio.ConnectionPool.from_url(
            settings.CACHES["default"]["LOCATION"],
            socket_connect_timeout=settings.REDIS_SOCKET_TIMEOUT,
            socket_timeout=None,
        )
        pool = _async_pools[loop] = LoopPool(factory.make_connection, int(settings.ASGI_FAST_READS_CONNECTIONS))
    return pool


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
    pool = get_async_pool()
    replies: list[Any] = []
    # One deadline for waiting for a connection, the write and every reply
    # (the connections have no socket timeout: see get_async_pool).
    try:
        async with asyncio.timeout(settings.REDIS_SOCKET_TIMEOUT):
            connection = await pool.get_connection()
            try:
                await connection.send_packed_command(packed)
                for _ in packed:
                    try:
                        replies.append(await connection.read_response(timeout=math.inf))
                    except ResponseError as exc:
                        replies.append(exc)
            except BaseException:
                await connection.disconnect(nowait=True)  # replies may be left unread
                raise
            finally:
                pool.release(connection)
    except TimeoutError as exc:
        raise RedisTimeoutError(f"no reply from Redis within {settings.REDIS_SOCKET_TIMEOUT} s") from exc
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
