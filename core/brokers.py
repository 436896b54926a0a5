"""The Celery broker: which kind ``CELERY_BROKER_URL`` names, and its settings.

Redis (``redis://``, ``rediss://``) or RabbitMQ (``amqp://``, ``amqps://``,
``pyamqp://``); anything else stops the process at start with the reason,
before a worker or a web process runs with tasks going nowhere. See
docs/operating/brokers.md and docs/ARCHITECTURE.md.
"""

import json
import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:  # the settings import this module: Celery loads with the app, not here
    from celery import Celery

BrokerKind = Literal["redis", "amqp"]
_SCHEMES: dict[str, BrokerKind] = {
    "redis": "redis",
    "rediss": "redis",
    "amqp": "amqp",
    "amqps": "amqp",
    "pyamqp": "amqp",
}


def broker_kind(url: str) -> BrokerKind | None:
    """``"redis"`` or ``"amqp"`` for a well-formed broker URL, None for none
    (tasks run eagerly in the process); ImproperlyConfigured otherwise."""
    if not url:
        return None
    parts = urlsplit(url)
    shown = url.replace(f":{parts.password}@", ":***@", 1) if parts.password else url
    kind = _SCHEMES.get(parts.scheme)
    if kind is None:
        raise ImproperlyConfigured(
            f"CELERY_BROKER_URL: {shown!r} is neither a Redis (redis://host:port/db) "
            "nor a RabbitMQ (amqp://user:password@host:port/vhost) URL."
        )
    try:
        parts.port  # noqa: B018  (parsing it is the check)
    except ValueError as error:
        raise ImproperlyConfigured(f"CELERY_BROKER_URL: {shown!r} has a bad port ({error}).") from None
    if not parts.hostname:
        raise ImproperlyConfigured(f"CELERY_BROKER_URL: {shown!r} names no host.")
    database = parts.path.strip("/")
    if kind == "redis" and database and not database.isdigit():
        raise ImproperlyConfigured(f"CELERY_BROKER_URL: {shown!r}: a Redis database is a number (redis://host:port/1).")
    return kind


def amqp_settings() -> dict[str, Any]:
    """Celery settings (without the ``CELERY_`` prefix) for RabbitMQ.

    Quorum queues: replicated (Raft) and durable, the queue type RabbitMQ
    recommends for work that must not be lost; every queue Celery declares,
    named in the settings or only on a worker's ``-Q``, is one. Celery then
    turns off global QoS (quorum queues do not have it) and delays countdown
    retries through RabbitMQ's own delayed delivery. Publisher confirms: a
    task handed over is on the broker, or the hand-over fails (and the
    pending row is handed over again later)."""
    return {
        "TASK_DEFAULT_QUEUE_TYPE": "quorum",
        "TASK_CREATE_MISSING_QUEUE_TYPE": "quorum",
        "WORKER_DETECT_QUORUM_QUEUES": True,
        "BROKER_TRANSPORT_OPTIONS": {"confirm_publish": True},
    }


# How many held messages one pass looks at: a worker holds its prefetch (one
# per process) and the countdown retries it waits on (those look old too, and
# are skipped after a look at their task name); the rest wait for the next pass.
RESTORE_SCAN_MAX = 2000
RESTORE_BATCH = 200  # held messages read per round trip


def restore_held(app: "Celery", *, tasks: Collection[str], older_than: float) -> int:
    """On a Redis broker, put back in their queues the messages of ``tasks``
    that a worker took more than ``older_than`` seconds ago and has not
    acknowledged; how many (0 on RabbitMQ, which requeues a dead worker's
    messages when its connection drops).

    A worker killed with a task taken but not started (its prefetch: the next
    chunk of a fan-out) leaves the message in the transport's unacknowledged
    set, where kombu restores it only after the visibility timeout, which has
    to exceed the longest periodic job. For short, idempotent tasks the caller
    names (delivery chunks, with ``older_than`` longer than one runs) a
    message held that long belongs to a dead worker, or to one so late that
    running it again is what the delivery's run lease does anyway. Each is
    moved back with kombu's own restore (a WATCHed transaction: one the worker
    acknowledged meanwhile is gone and not requeued)."""
    with app.pool.acquire(block=True) as connection:
        if connection.transport.driver_type != "redis":
            return 0
        channel = connection.default_channel
        client = channel.client
        ceiling = time.time() - older_than
        tags = client.zrange(
            channel.unacked_index_key, ceiling, 0, desc=True, byscore=True, offset=0, num=RESTORE_SCAN_MAX
        )
        restored = 0
        for start in range(0, len(tags), RESTORE_BATCH):
            batch = tags[start : start + RESTORE_BATCH]
            with client.pipeline(transaction=False) as pipe:
                for tag in batch:
                    pipe.hget(channel.unacked_key, tag)
                held = pipe.execute()
            for tag, raw in zip(batch, held, strict=True):
                if raw is None:
                    continue  # acknowledged since
                if json.loads(raw)[0].get("headers", {}).get("task") not in tasks:
                    continue
                channel.qos.restore_by_tag(tag, client)
                restored += 1
        return restored
