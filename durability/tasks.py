"""Celery adapters of the core app."""

from celery import shared_task

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
def check_redis_task(repair: bool = False) -> dict[str, int | str]:
    """The admin's "Run check now": compare the read model with PostgreSQL and
    record a run (``repair``: mend what drifted, then check again).

    Nothing runs it periodically: the projections whose process died after
    their commit are replayed from their records (``durability.projection``).
    Redis being down ends in an error run, not a task failure.
    """
    result = check_run(repair=repair)
    return {
        "run": result.run.pk,
        "drift": result.drift_count,
        "repaired": result.repaired_count,
        "error": result.error,
    }
