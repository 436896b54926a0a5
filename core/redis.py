"""The one place that hands out the Redis connection of the read model.

Normally that is django-redis's ``default`` alias (real Redis, or the embedded
fakeredis server). When ``MESSAGECENTER_REDIS_CLUSTER_URL`` is set the read
model talks to a Redis Cluster through redis-py's ``RedisCluster`` instead:
django-redis cannot follow cluster redirects (MovedError, its issue #606).
"""

from functools import cache
from typing import Any

from django.conf import settings
from django_redis import get_redis_connection
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

RedisClient = Any  # redis.Redis | redis.cluster.RedisCluster; both speak the same commands


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
