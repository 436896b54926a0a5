"""Celery adapters of announcements. Idempotent: a platform sync rebuilds the
indexes from PostgreSQL, so running it twice (or late) is harmless."""

from celery import shared_task
from redis.exceptions import RedisError

from accounts.platforms import ALL_PLATFORMS
from notices import projection


@shared_task(
    name="notices.platform_sync",
    autoretry_for=(RedisError,),
    retry_backoff=2,
    retry_backoff_max=300,
    max_retries=50,
)
def platform_sync_task(platform: str, drop_ids: list[int]) -> None:
    """Retry of a sync that failed after commit (Redis was unreachable)."""
    projection.platform(platform, drop_ids)


@shared_task(name="notices.rebuild_all")
def rebuild_all_task() -> None:
    """Periodic safety net: rebuild every platform's indexes (also prunes expired ids)."""
    for platform in ALL_PLATFORMS:
        projection.platform(platform)
