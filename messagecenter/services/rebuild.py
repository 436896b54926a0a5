"""Rebuild of what users share in the read model from PostgreSQL (after a Redis loss).

Bulletins, the pull index with its messages' details, and subscriber sets,
idempotently: every step only adds what is missing. Each user's own part
(read state, memberships, mutes, hidden and parked items, push fan-outs,
answers) is a cache filled on the user's first read (``messagecenter.fill``),
which also brings back the details of the user's pushed items and
notifications that Redis lacks; so after a loss Redis grows back with the
users who return, not with everyone, and the rebuild's time grows with the
broadcasts, not with every item ever pushed. ``inbox_warm`` fills users
ahead of that.
"""

from collections.abc import Iterator
from datetime import datetime

from django.db.models import QuerySet
from django.utils import timezone

from durability.progress import SILENT, Progress
from durability.rebuild import RebuildStep
from messagecenter import projection
from messagecenter.items import details_of_messages, message_entry
from messagecenter.models import Bulletin, DeliveryMode, Message, MessageStatus
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

    with progress.stage("subscriptions", 1) as stage:
        notifications = notification_rebuild()
        stage.advance()
    return {"bulletins": len(bulletin_ids), "pull_messages": messages, **notifications}


def _messages_rebuild(*, progress: Progress, now: datetime) -> int:
    """Every pull message that reached its audience and has not expired,
    registered again with its detail; returns how many. A push message's
    detail comes back with the fills of its recipients who return."""
    # Scheduled and cancelled messages reached nobody: nothing of theirs is in Redis.
    pulled = (
        Message.objects.filter(delivery=DeliveryMode.PULL)
        .exclude(status__in=[MessageStatus.RETRACTED, MessageStatus.SCHEDULED, MessageStatus.CANCELLED])
        .exclude(expire_at__lte=now)
        .select_related("sender")
    )
    with progress.stage("pull messages", pulled.count()) as stage:
        for chunk in _chunks(pulled):
            shown = details_of_messages(chunk)
            for message in chunk:
                audience = None if message.everyone else message.audience
                inbox_publish_pull(entry=message_entry(message), detail=shown[message.ref], audience=audience)
            stage.advance(len(chunk))
    return stage.count


def _chunks(messages: QuerySet[Message]) -> Iterator[list[Message]]:
    """The messages BATCH at a time, in id order, a query per chunk (keyset:
    messages written meanwhile neither repeat nor shift the chunks)."""
    last = 0
    while chunk := list(messages.filter(pk__gt=last).order_by("pk")[:BATCH]):
        yield chunk
        last = chunk[-1].pk


# The rebuild's step of this app, after the announcements' (its AppConfig names it).
REBUILD_STEP = RebuildStep("messagecenter", 20, lambda progress: inbox_rebuild(progress=progress))
