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

from core import outbox
from notices import readmodel
from notices.models import Announcement, AnnouncementPlatform

logger = logging.getLogger(__name__)

INDEXED_FIELDS = ("publish_at", "expire_at")


PLATFORM_SYNC_TOPIC = "notices.platform_sync"


def _sync_after_commit(platform: str, drop_ids: tuple[int, ...] = ()) -> None:
    def sync() -> None:
        try:
            readmodel.platform_sync(platform=platform, drop_ids=drop_ids)
        except RedisError:
            # Until a sync succeeds, readers see the index as it was before this
            # commit (the PostgreSQL fallback while Redis is down); the outbox
            # replays the sync once Redis answers.
            logger.warning("could not sync announcements of platform %s to redis; queued in the outbox", platform)
            outbox.enqueue_after_failure(
                topic=PLATFORM_SYNC_TOPIC, payload={"platform": platform, "drop_ids": list(drop_ids)}
            )

    transaction.on_commit(sync)


def _add_after_commit(row: AnnouncementPlatform) -> None:
    """After commit, add a new announcement's entry to the platform's index
    (readmodel.platform_add: no PostgreSQL read; a full rebuild when it cannot)."""
    announcement = row.announcement
    platform = row.platform
    entry: readmodel.Entry = (
        int(announcement.pk),
        readmodel.to_ms(announcement.publish_at),
        readmodel.to_ms(announcement.expire_at) if announcement.expire_at is not None else None,
    )
    # Read now, before the commit: the add's fence (see platform_add).
    seen = readmodel.platform_revision_seen(platform=platform)

    def add() -> None:
        try:
            readmodel.platform_add(platform=platform, entry=entry, seen=seen)
        except RedisError:
            # As _sync_after_commit: the outbox's replay rebuilds the platform.
            logger.warning("could not add announcement to platform %s in redis; queued in the outbox", platform)
            outbox.enqueue_after_failure(topic=PLATFORM_SYNC_TOPIC, payload={"platform": platform, "drop_ids": []})

    transaction.on_commit(add)


def replay_platform_sync(payload: dict[str, Any], user_id: int | None) -> None:
    """Outbox handler: the sync rebuilds the platform's index from PostgreSQL (idempotent)."""
    readmodel.platform_sync(platform=str(payload["platform"]), drop_ids=[int(i) for i in payload["drop_ids"]])


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
    announcement = AnnouncementPlatform.announcement.field.get_cached_value(instance, default=None)
    if getattr(announcement, "notices_new", False):
        # announcement_create inserted the announcement and this row in one
        # transaction: the entry is known, nothing else can have changed it
        # before the commit.
        _add_after_commit(instance)
        return
    _sync_after_commit(instance.platform)


@receiver(post_delete, sender=AnnouncementPlatform, dispatch_uid="notices_platform_deleted")
def platform_removed(sender: Any, instance: AnnouncementPlatform, **kwargs: Any) -> None:
    # Also reached for each row when the announcement itself is deleted (cascade).
    _sync_after_commit(instance.platform, drop_ids=(int(instance.announcement_id),))
