"""Rebuild of what users share in the read model from PostgreSQL (after a Redis loss).

Bulletins, the pull index, item details and subscriber sets, idempotently:
every step only adds what is missing. Each user's own part (read state,
memberships, mutes, hidden and parked items, push fan-outs, answers) is a
cache filled on the user's first read (``messagecenter.fill``), so
after a loss Redis grows back with the users who return, not with everyone;
``inbox_warm`` fills users ahead of that.
"""

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.utils import timezone

from durability.progress import SILENT, Progress
from durability.rebuild import RebuildStep
from messagecenter import projection
from messagecenter.items import message_detail, message_entry
from messagecenter.models import Bulletin, DeliveryMode, Message, MessageImage, MessageStatus
from messagecenter.readmodel import publish
from messagecenter.services.inbox import inbox_publish_pull
from messagecenter.services.notifications import notification_rebuild

BATCH = 1000


def inbox_rebuild(*, progress: Progress = SILENT) -> dict[str, int]:
    """Mirror what users share from PostgreSQL into Redis; returns what was touched.

    Safe while the site serves: every step only adds what is missing.
    """
    now = timezone.now()
    bulletin_ids = list(Bulletin.objects.values_list("pk", flat=True))
    with progress.stage("bulletins", len(bulletin_ids)) as stage:
        for bulletin_id in bulletin_ids:
            projection.bulletins([bulletin_id], edit=False)
            stage.advance()

    messages = _messages_rebuild(progress=progress, now=now)

    with progress.stage("subscriptions and notifications", 1) as stage:
        notifications = notification_rebuild(now=now)
        stage.advance()
    return {"bulletins": len(bulletin_ids), "messages": messages, **notifications}


def _messages_rebuild(*, progress: Progress, now: datetime) -> int:
    """Every message that reached its audience and has not expired: a pull
    message registered again, a push message's detail (its recipients get it
    back with their fills); returns how many."""
    # Scheduled and cancelled messages reached nobody: nothing of theirs is in Redis.
    live = (
        Message.objects.exclude(status__in=[MessageStatus.RETRACTED, MessageStatus.SCHEDULED, MessageStatus.CANCELLED])
        .exclude(expire_at__lte=now)
        .select_related("sender")
    )
    pulled = live.filter(delivery=DeliveryMode.PULL)
    # A push message's audience bitmaps are not needed here (its recipients
    # are its rows), and can be large.
    pushed = live.exclude(delivery=DeliveryMode.PULL).defer("users_bitmap", "audience_bitmap").order_by("pk")
    with progress.stage("messages", live.count()) as stage:
        for message in pulled.iterator(chunk_size=BATCH):
            entry = message_entry(message)
            inbox_publish_pull(
                entry=entry, detail=message_detail(message), audience=None if message.everyone else message.audience
            )
            stage.advance()

        def details() -> Iterator[tuple[str, dict[str, Any]]]:
            last = 0
            while chunk := list(pushed.filter(pk__gt=last)[:BATCH]):
                # The chunk's image files in one query (few messages have any).
                images: dict[int, list[MessageImage]] = {}
                for image in MessageImage.objects.filter(message_id__in=[m.pk for m in chunk]):
                    images.setdefault(image.message_id, []).append(image)
                for message in chunk:
                    yield message.ref, message_detail(message, images.get(message.pk, []))
                stage.advance(len(chunk))
                last = chunk[-1].pk

        publish.item_details_put(details())
    return stage.count


# The rebuild's step of this app, after the announcements' (its AppConfig names it).
REBUILD_STEP = RebuildStep("messagecenter", 20, lambda progress: inbox_rebuild(progress=progress))
