"""Receivers: announcement changes made anywhere (services, admin, shell) reach Redis.

Only ``publish_at``, ``expire_at`` and the platform rows shape the indexes;
saves that change nothing else (title, body, pinned) skip Redis entirely (the
times as loaded are kept by ``core.projection.LoadedValues``, by instance
identity). Each receiver asks ``notices.projection`` for a run after commit,
which reads PostgreSQL afresh: a rolled-back change never reaches Redis and
the requests of one transaction become one run per platform.
"""

from typing import Any

from django.db.models.signals import post_delete, post_init, post_save
from django.dispatch import receiver

from core.projection import LoadedValues
from notices import projection
from notices.models import Announcement, AnnouncementPlatform

INDEXED_FIELDS = ("publish_at", "expire_at")

_indexed = LoadedValues(INDEXED_FIELDS)


@receiver(post_init, sender=Announcement, dispatch_uid="notices_announcement_loaded")
def announcement_loaded(sender: Any, instance: Announcement, **kwargs: Any) -> None:
    if instance.pk is not None:
        _indexed.remember(instance)


@receiver(post_save, sender=Announcement, dispatch_uid="notices_announcement_saved")
def announcement_saved(sender: Any, instance: Announcement, created: bool, raw: bool = False, **kwargs: Any) -> None:
    # A new announcement has no platform rows yet: their own receivers ask.
    update_fields = kwargs.get("update_fields")
    relevant = update_fields is None or bool(set(update_fields) & set(INDEXED_FIELDS))
    changed = _indexed.get(instance) != _indexed.of(instance)
    _indexed.remember(instance)
    if not (raw or created) and relevant and changed:
        projection.announcement_changed(instance)


@receiver(post_save, sender=AnnouncementPlatform, dispatch_uid="notices_platform_saved")
def platform_added(
    sender: Any, instance: AnnouncementPlatform, created: bool, raw: bool = False, **kwargs: Any
) -> None:
    if created and not raw:
        projection.platform_row_added(instance)


@receiver(post_delete, sender=AnnouncementPlatform, dispatch_uid="notices_platform_deleted")
def platform_removed(sender: Any, instance: AnnouncementPlatform, **kwargs: Any) -> None:
    projection.platform_row_removed(instance)
