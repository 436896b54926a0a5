"""Celery adapters: take ids, load rows, call a service. Idempotent; late acks
are set globally (CELERY_TASK_ACKS_LATE)."""

from typing import Any

from celery import shared_task
from redis.exceptions import RedisError

from messagecenter import projection, services
from messagecenter.models import Message, Notification
from messagecenter.services.snapshots import inbox_read_snapshot


@shared_task(name="messagecenter.message_deliver", autoretry_for=(RedisError,), retry_backoff=True, max_retries=8)
def message_deliver_task(message_id: int) -> int:
    message = Message.objects.filter(pk=message_id).first()
    if message is None:
        return 0
    return services.message_deliver(message=message)


@shared_task(name="messagecenter.message_fanout_chunk", autoretry_for=(RedisError,), retry_backoff=True, max_retries=8)
def message_fanout_chunk_task(message_id: int, index: int) -> int:
    message = Message.objects.filter(pk=message_id).first()
    if message is None:
        return 0
    return services.message_fanout_chunk(message=message, index=index)


@shared_task(name="messagecenter.mirror", autoretry_for=(RedisError,), retry_backoff=True, max_retries=8)
def mirror_task(name: str, args: list[Any]) -> None:
    """Retry of a projection that failed after commit, as the outbox keeps it (idempotent)."""
    projection.replay_mirror({"name": name, "args": args}, None)


@shared_task(name="messagecenter.cleanup_expired", autoretry_for=(RedisError,), retry_backoff=True, max_retries=3)
def cleanup_expired_task() -> int:
    """Periodic (Celery beat): drop expired messages' stored-once Redis data."""
    return services.message_cleanup_expired()


@shared_task(name="messagecenter.removed_trim", autoretry_for=(RedisError,), retry_backoff=True, max_retries=3)
def removed_trim_task() -> int:
    """Periodic (Celery beat): bound the global list of removed inbox items."""
    return services.inbox_removed_trim()


@shared_task(name="messagecenter.first_reads_fold", autoretry_for=(RedisError,), retry_backoff=True, max_retries=3)
def first_reads_fold_task() -> int:
    """Periodic (Celery beat): add pending first reads to the read-rate counters."""
    return services.inbox_first_reads_fold()


# --- subscriptions and notifications ---------------------------------------------


@shared_task(name="messagecenter.notification_deliver", autoretry_for=(RedisError,), retry_backoff=True, max_retries=8)
def notification_deliver_task(notification_id: int) -> int:
    notification = Notification.objects.filter(pk=notification_id).first()
    if notification is None:
        return 0
    return services.notification_deliver(notification=notification)


@shared_task(
    name="messagecenter.notification_fanout_chunk", autoretry_for=(RedisError,), retry_backoff=True, max_retries=8
)
def notification_fanout_chunk_task(notification_id: int, index: int) -> int:
    notification = Notification.objects.filter(pk=notification_id).first()
    if notification is None:
        return 0
    return services.notification_fanout_chunk(notification=notification, index=index)


@shared_task(name="messagecenter.notifications_sweep", autoretry_for=(RedisError,), retry_backoff=True, max_retries=3)
def notifications_sweep_task() -> dict[str, int]:
    """Periodic (Celery beat): drop expired notifications from Redis (ZREMRANGEBYSCORE on the expiry score)."""
    return services.notification_sweep()


@shared_task(name="messagecenter.rules_run_due", autoretry_for=(RedisError,), retry_backoff=True, max_retries=3)
def rules_run_due_task() -> int:
    """Periodic (Celery beat): run the notification rules that are due; returns how many ran."""
    return len(services.rules_run_due())


@shared_task(name="messagecenter.read_snapshot", autoretry_for=(RedisError,), retry_backoff=True, max_retries=3)
def read_snapshot_task() -> int:
    """Periodic (Celery beat, every MESSAGECENTER_SNAPSHOT_SECONDS): copy changed inbox read
    bitmaps and unseen watermarks to PostgreSQL. Idempotent: a second run finds nothing dirty."""
    return inbox_read_snapshot()
