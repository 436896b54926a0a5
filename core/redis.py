"""The one place that hands out the Redis connection of the read model.

Normally that is django-redis's ``default`` alias (real Redis, or the embedded
fakeredis server). When ``MESSAGECENTER_REDIS_CLUSTER_URL`` is set the read
model talks to a Redis Cluster through redis-py's ``RedisCluster`` instead:
django-redis's client cannot follow cluster redirects (it fails with MovedError).
"""

from collections.abc import Sequence
from functools import cache
from typing import Any

import hiredis
from django.conf import settings
from django_redis import get_redis_connection
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError
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
