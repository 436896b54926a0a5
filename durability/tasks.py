"""Celery adapters of the core app."""

from celery import shared_task
from django.conf import settings

from durability import outbox
from durability.drift import check_run


@shared_task(name="core.outbox_replay")
def outbox_replay_task() -> int:
    """Periodic (Celery beat): apply the read-model writes that could not reach Redis.

    Cheap when the outbox is empty (one indexed query); stops at once while
    Redis is still down. Concurrent runs do not apply one entry twice.
    """
    return outbox.replay()


@shared_task(name="core.check_redis")
def check_redis_task(repair: bool | None = None) -> dict[str, int | str]:
    """Periodic (Celery beat, every MESSAGECENTER_CHECK_SECONDS) and the admin's
    "Run check now": compare the read model with PostgreSQL and record a run.

    ``repair`` None means MESSAGECENTER_CHECK_REPAIR. Idempotent: a repair only
    re-runs mirrors. Redis being down ends in an error run, not a task failure.
    """
    result = check_run(repair=bool(settings.MESSAGECENTER_CHECK_REPAIR) if repair is None else repair)
    return {
        "run": result.run.pk,
        "drift": result.drift_count,
        "repaired": result.repaired_count,
        "error": result.error,
    }
