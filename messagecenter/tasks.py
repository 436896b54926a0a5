"""Celery adapters: take ids, load rows, call a service. Idempotent; late acks
are set globally (CELERY_TASK_ACKS_LATE)."""

from typing import Any

from celery import shared_task
from redis.exceptions import RedisError

from messagecenter import fill, projection, services
from messagecenter.services import channels, delivery, digests, messages, notifications
from messagecenter.services.channels import plan as channels_plan

# Delivery tasks take no Celery retries: a Redis error leaves the work's
# pending row due again within seconds, and the relay sends it again however
# long Redis is away (messagecenter/services/delivery.py).


@shared_task(name="messagecenter.message_deliver")
def message_deliver_task(message_id: int) -> int:
    return delivery.delivery_run(task=messages.DELIVER_TASK, object_id=message_id)


@shared_task(name="messagecenter.message_fanout_chunk")
def message_fanout_chunk_task(message_id: int, index: int) -> int:
    return delivery.delivery_run(task=messages.FANOUT_CHUNK_TASK, object_id=message_id, index=index)


@shared_task(name="messagecenter.delivery_relay")
def delivery_relay_task() -> int:
    """Periodic (Celery beat, every MESSAGECENTER_DELIVERY_RELAY_SECONDS): hand
    pending deliveries that are due to the workers; one indexed query when none is."""
    return delivery.delivery_relay()


@shared_task(name="messagecenter.mirror", autoretry_for=(RedisError,), retry_backoff=True, max_retries=8)
def mirror_task(name: str, args: list[Any]) -> None:
    """Retry of a projection that failed after commit, as the outbox keeps it (idempotent)."""
    projection.replay_mirror({"name": name, "args": args}, None)


@shared_task(name="messagecenter.cleanup_expired", autoretry_for=(RedisError,), retry_backoff=True, max_retries=3)
def cleanup_expired_task() -> int:
    """Periodic (Celery beat): drop expired messages' stored-once Redis data, and
    idempotency keys past their window."""
    services.message_send_keys_purge()
    return services.message_cleanup_expired()


@shared_task(name="messagecenter.retention_purge", autoretry_for=(RedisError,), retry_backoff=True, max_retries=3)
def retention_purge_task() -> dict[str, int]:
    """Periodic (Celery beat): purge items past retention from PostgreSQL, in short batches."""
    return services.retention_purge()


@shared_task(name="messagecenter.removed_trim", autoretry_for=(RedisError,), retry_backoff=True, max_retries=3)
def removed_trim_task() -> int:
    """Periodic (Celery beat): bound the global list of removed inbox items."""
    return services.inbox_removed_trim()


@shared_task(name="messagecenter.first_reads_fold", autoretry_for=(RedisError,), retry_backoff=True, max_retries=3)
def first_reads_fold_task() -> int:
    """Periodic (Celery beat): add pending first reads to the read-rate counters."""
    return services.inbox_first_reads_fold()


# --- subscriptions and notifications ---------------------------------------------


@shared_task(name="messagecenter.notification_deliver")
def notification_deliver_task(notification_id: int) -> int:
    return delivery.delivery_run(task=notifications.DELIVER_TASK, object_id=notification_id)


@shared_task(name="messagecenter.notification_fanout_chunk")
def notification_fanout_chunk_task(notification_id: int, index: int) -> int:
    return delivery.delivery_run(task=notifications.FANOUT_CHUNK_TASK, object_id=notification_id, index=index)


@shared_task(name="messagecenter.notifications_sweep", autoretry_for=(RedisError,), retry_backoff=True, max_retries=3)
def notifications_sweep_task() -> dict[str, int]:
    """Periodic (Celery beat): drop expired notifications from Redis (ZREMRANGEBYSCORE on the expiry score)."""
    return services.notification_sweep()


@shared_task(name="messagecenter.rules_run_due", autoretry_for=(RedisError,), retry_backoff=True, max_retries=3)
def rules_run_due_task() -> int:
    """Periodic (Celery beat): run the notification rules that are due; returns how many ran."""
    return len(services.rules_run_due())


@shared_task(name="messagecenter.send_scheduled")
def send_scheduled_task() -> int:
    """Periodic (Celery beat, every MESSAGECENTER_SCHEDULED_SECONDS): send the scheduled
    messages and notifications whose send_at has passed; each exactly once (row locks)."""
    return services.scheduled_send_due()


@shared_task(name="messagecenter.digests_send")
def digests_send_task() -> dict[str, int]:
    """Periodic (Celery beat, every MESSAGECENTER_DIGEST_SECONDS): send the due
    e-mail digests. Safe to run twice at once: each user's period is claimed once."""
    run = digests.digests_send()
    return {"sent": run.sent, "failed": run.failed, "empty": run.empty}


# --- channels: Web Push and e-mail -------------------------------------------------


@shared_task(name="messagecenter.channel_push_chunk")
def channel_push_chunk_task(channels_id: int, index: int) -> int:
    """One chunk of an item's push fan-out (a pending delivery's row)."""
    return delivery.delivery_run(task=channels_plan.PUSH_CHUNK_TASK, object_id=channels_id, index=index)


@shared_task(name="messagecenter.push_deliver")
def push_deliver_task(delivery_id: int) -> str:
    """One more attempt of a failed push; a failure leaves the row due after its delay."""
    return channels.push_deliver(delivery_id=delivery_id)


@shared_task(name="messagecenter.push_relay")
def push_relay_task() -> int:
    """Periodic (Celery beat, every WEBHOOK_RELAY_SECONDS): hand due push retries to the workers."""
    return channels.push_relay()


@shared_task(name="messagecenter.channels_email_scan")
def channels_email_scan_task() -> dict[str, int]:
    """Periodic (Celery beat, every MESSAGECENTER_CHANNEL_SCAN_SECONDS): e-mail the
    recipients of due items who have not read them. Safe to run twice at once:
    each batch is claimed once."""
    run = channels.channels_email_scan()
    return {"items": run.items, "looked_at": run.looked_at, "sent": run.sent, "deferred": run.deferred}


@shared_task(name="messagecenter.channels_quiet_release")
def channels_quiet_release_task() -> int:
    """Periodic (Celery beat, every minute): send what quiet hours held, once they ended."""
    return channels.channels_quiet_release()


@shared_task(name="messagecenter.inbox_idle_drop")
def inbox_idle_drop_task() -> int:
    """Periodic (beat): drop the rest of users' parts whose state hash expired or was evicted."""
    return fill.inbox_idle_drop()
