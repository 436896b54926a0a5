"""Receivers that mirror committed announcement changes into the Redis read model.

Only ``publish_at``, ``expire_at`` and the platform rows shape the indexes;
saves that change nothing else (title, body, pinned) skip Redis entirely.
Work runs in ``transaction.on_commit`` and reads PostgreSQL afresh, so a
rolled-back change never reaches Redis and several signals of one transaction
converge on the committed state.
"""

import logging
from typing import Any

from django.db import transaction
from django.db.models.signals import post_delete, post_init, post_save
from django.dispatch import receiver
from redis.exceptions import RedisError

from notices import readmodel
from notices.models import Announcement, AnnouncementPlatform

logger = logging.getLogger(__name__)

INDEXED_FIELDS = ("publish_at", "expire_at")


def _sync_after_commit(platform: str, drop_ids: tuple[int, ...] = ()) -> None:
    def sync() -> None:
        try:
            readmodel.platform_sync(platform=platform, drop_ids=drop_ids)
        except RedisError:
            # Until a sync succeeds, readers see the index as it was before this
            # commit; the retried task (and the periodic rebuild) catches it up.
            logger.warning("could not sync announcements of platform %s to redis; retrying later", platform)
            _retry_later(platform, drop_ids)

    transaction.on_commit(sync)


def _retry_later(platform: str, drop_ids: tuple[int, ...]) -> None:
    from notices.tasks import platform_sync_task

    try:
        platform_sync_task.apply_async((platform, list(drop_ids)), countdown=5)
    except Exception:
        # Broker down as well (or an eager run that failed again): the periodic
        # rebuild_all task and `manage.py notices_rebuild` restore the index.
        logger.exception("could not schedule a retry of the %s announcement sync", platform)


def _indexed_values(instance: Announcement) -> tuple[Any, ...]:
    return tuple(instance.__dict__.get(name) for name in INDEXED_FIELDS)


@receiver(post_init, sender=Announcement, dispatch_uid="notices_announcement_loaded")
def announcement_loaded(sender: Any, instance: Announcement, **kwargs: Any) -> None:
    instance._notices_indexed = _indexed_values(instance)  # type: ignore[attr-defined]


@receiver(post_save, sender=Announcement, dispatch_uid="notices_announcement_saved")
def announcement_saved(sender: Any, instance: Announcement, created: bool, raw: bool = False, **kwargs: Any) -> None:
    # A new announcement has no platform rows yet: their own receivers sync.
    update_fields = kwargs.get("update_fields")
    relevant = update_fields is None or bool(set(update_fields) & set(INDEXED_FIELDS))
    changed = _indexed_values(instance) != getattr(instance, "_notices_indexed", None)
    instance._notices_indexed = _indexed_values(instance)  # type: ignore[attr-defined]
    if raw or created or not relevant or not changed:
        return
    for platform in AnnouncementPlatform.objects.filter(announcement=instance).values_list("platform", flat=True):
        _sync_after_commit(platform)


@receiver(post_save, sender=AnnouncementPlatform, dispatch_uid="notices_platform_saved")
def platform_added(
    sender: Any, instance: AnnouncementPlatform, created: bool, raw: bool = False, **kwargs: Any
) -> None:
    if raw or not created:
        return
    _sync_after_commit(instance.platform)


@receiver(post_delete, sender=AnnouncementPlatform, dispatch_uid="notices_platform_deleted")
def platform_removed(sender: Any, instance: AnnouncementPlatform, **kwargs: Any) -> None:
    # Also reached for each row when the announcement itself is deleted (cascade).
    _sync_after_commit(instance.platform, drop_ids=(int(instance.announcement_id),))
