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
    prefix_drop()


def prefix_drop(batch: int = 1000) -> int:
    """Delete every key under ``MESSAGECENTER_KEY_PREFIX`` (and nothing else: the
    broker, Django's cache and other users of the same Redis keep theirs), a SCAN
    page at a time; UNLINK frees large values off Redis's main thread. Returns
    how many keys went. A single Redis takes a page in one UNLINK; a cluster
    node refuses a multi-key command across hash slots even when it holds them
    all, so there each key goes in a command of its own (pipelined)."""
    client = get_redis()
    cluster = isinstance(client, RedisCluster)
    nodes = [client.get_redis_connection(node) for node in client.get_primaries()] if cluster else [client]
    pattern = keys.match_under(keys.prefix())
    dropped = 0
    for node_client in nodes:
        cursor = None
        while cursor != 0:
            cursor, found = node_client.scan(cursor or 0, match=pattern, count=batch)
            if not found:
                continue
            if cluster:
                pipe = node_client.pipeline(transaction=False)
                for key in found:
                    pipe.unlink(key)
                dropped += sum(pipe.execute())
            else:
                dropped += node_client.unlink(*found)
    return dropped
