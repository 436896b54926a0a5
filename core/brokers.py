"""The Celery broker: which kind ``CELERY_BROKER_URL`` names, and its settings.

Redis (``redis://``, ``rediss://``) or RabbitMQ (``amqp://``, ``amqps://``,
``pyamqp://``); anything else stops the process at start with the reason,
before a worker or a web process runs with tasks going nowhere. See
docs/operating/brokers.md and docs/ARCHITECTURE.md.
"""

from typing import Any, Literal
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

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
