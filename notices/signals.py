"""Receivers: announcement changes made anywhere (services, admin, shell) reach Redis.

Only ``publish_at``, ``expire_at`` and the platform rows shape the indexes;
the list's cached summary holds the title, summary, publish time and pin.
A save that changes none of those (the body alone) skips Redis entirely (the
values as loaded are kept by ``durability.projection.LoadedValues``, by instance
identity). Each receiver asks ``notices.projection`` for a run after commit,
which reads PostgreSQL afresh: a rolled-back change never reaches Redis and
the requests of one transaction become one run per platform.
"""

from typing import Any

from django.db.models.signals import post_delete, post_init, post_save
from django.dispatch import receiver

from durability.projection import LoadedValues
from notices import projection
from notices.models import Announcement, AnnouncementPlatform

INDEXED_FIELDS = ("publish_at", "expire_at")
SUMMARY_FIELDS = ("title", "summary", "publish_at", "pinned", "translations")

_indexed = LoadedValues(INDEXED_FIELDS)
_summarised = LoadedValues(SUMMARY_FIELDS)


@receiver(post_init, sender=Announcement, dispatch_uid="notices_announcement_loaded")
def announcement_loaded(sender: Any, instance: Announcement, **kwargs: Any) -> None:
    if instance.pk is not None:
        _indexed.remember(instance)
        _summarised.remember(instance)


@receiver(post_save, sender=Announcement, dispatch_uid="notices_announcement_saved")
def announcement_saved(sender: Any, instance: Announcement, created: bool, raw: bool = False, **kwargs: Any) -> None:
    # A new announcement has no platform rows yet: their own receivers ask.
    update_fields = kwargs.get("update_fields")
    relevant = update_fields is None or bool(set(update_fields) & set(INDEXED_FIELDS))
    changed = _indexed.get(instance) != _indexed.of(instance)
    _indexed.remember(instance)
    if not (raw or created) and relevant and changed:
        projection.announcement_changed(instance)
    # A new id was never listed, so no summary of it is cached; an update
    # naming fields tells which ones changed only by comparing values.
    summary_changed = _summarised.get(instance) != _summarised.of(instance)
    _summarised.remember(instance)
    if not (raw or created) and summary_changed:
        projection.summary_changed(int(instance.pk))


@receiver(post_delete, sender=Announcement, dispatch_uid="notices_announcement_deleted")
def announcement_deleted(sender: Any, instance: Announcement, **kwargs: Any) -> None:
    projection.summary_changed(int(instance.pk))


@receiver(post_save, sender=AnnouncementPlatform, dispatch_uid="notices_platform_saved")
def platform_added(
    sender: Any, instance: AnnouncementPlatform, created: bool, raw: bool = False, **kwargs: Any
) -> None:
    if created and not raw:
        projection.platform_row_added(instance)


@receiver(post_delete, sender=AnnouncementPlatform, dispatch_uid="notices_platform_deleted")
def platform_removed(sender: Any, instance: AnnouncementPlatform, **kwargs: Any) -> None:
    projection.platform_row_removed(instance)
