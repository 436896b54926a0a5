"""Rebuild of the read model from PostgreSQL (after a Redis loss).

Restores the committed read state first (read and ever-read bit-sets, unseen
watermarks: every acknowledged mark), then groups, mute periods, hidden items, bulletins, message details,
pull items, push fan-outs, subscriber sets, live notifications, and last the
archived and snoozed items, all idempotently. Deliveries and merges count an item unread only when its
restored read bit is 0, so the unread counters come out as PostgreSQL implies.
"""

import math
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from core.progress import SILENT, Progress
from messagecenter import projection
from messagecenter.items import message_detail, message_entry
from messagecenter.models import (
    Bulletin,
    DeliveryMode,
    InboxHidden,
    InboxItemState,
    Message,
    MessageResponse,
    MessageStatus,
    MutePeriod,
    UserGroupMembership,
)
from messagecenter.readmodel import publish, to_ms
from messagecenter.services.grouping import groups_rebuild
from messagecenter.services.inbox import inbox_deliver, inbox_publish_pull
from messagecenter.services.notifications import notification_rebuild
from messagecenter.services.read_state import inbox_read_restore

BATCH = 1000


def inbox_rebuild(*, progress: Progress = SILENT) -> dict[str, int]:
    """Mirror everything PostgreSQL holds into Redis; returns what was touched.

    Safe while the site serves: every step only adds what is missing (NX
    writes, read state restored where Redis has no key), so newer marks stay.
    """
    now = timezone.now()
    # Read state before any item lands in an inbox (restore.lua would correct
    # the counters of items merged meanwhile too, but this way it has none to walk).
    restored = inbox_read_restore(batch=BATCH, progress=progress)

    user_ids = sorted(set(UserGroupMembership.objects.values_list("user_id", flat=True)))
    _users_stage(progress=progress, name="group memberships", user_ids=user_ids, project=projection.user_groups)
    # Mute periods before any item: the merges that follow on read consult them.
    muting = sorted(set(MutePeriod.objects.values_list("user_id", flat=True)))
    _users_stage(progress=progress, name="mute periods", user_ids=muting, project=projection.user_mutes)
    hidden = _hidden_rebuild(progress=progress, now_ms=to_ms(now))

    # Ended groups before the items: each item falls into the group it was in.
    with progress.stage("ended groups", 1) as stage:
        groups_rebuild()
        stage.advance()

    bulletin_ids = list(Bulletin.objects.values_list("pk", flat=True))
    with progress.stage("bulletins", len(bulletin_ids)) as stage:
        for bulletin_id in bulletin_ids:
            projection.bulletins([bulletin_id], edit=False)
            stage.advance()

    messages = _messages_rebuild(progress=progress, now=now)

    with progress.stage("subscriptions and notifications", 1) as stage:
        notifications = notification_rebuild(now=now)
        stage.advance()

    # Archived and snoozed items, once every item is back (an item not merged
    # yet is parked directly) and after the read state (a snooze
    # clears a read bit: its bitmap must not be created before the restore).
    states = _rows_stage(
        progress=progress,
        name="archived and snoozed items",
        rows=InboxItemState.objects.order_by("user_id").values_list("user_id", "item_id"),
        project=projection.item_places,
    )
    # Answers to actions: each user's responses hash (pages show them without SQL).
    answers = _rows_stage(
        progress=progress,
        name="answers to actions",
        rows=MessageResponse.objects.order_by("user_id").values_list("user_id", "message_id"),
        project=projection.responses,
    )
    return {
        "read_state": restored,
        "responses": answers,
        "users": len(user_ids),
        "muting_users": len(muting),
        "hidden": hidden,
        "bulletins": len(bulletin_ids),
        "messages": messages,
        "item_states": states,
        **notifications,
    }


def _users_stage(
    *, progress: Progress, name: str, user_ids: Sequence[int], project: Callable[[list[int]], None]
) -> None:
    """One stage that projects these users' state, BATCH users a call."""
    with progress.stage(name, len(user_ids)) as stage:
        for start in range(0, len(user_ids), BATCH):
            batch = list(user_ids[start : start + BATCH])
            project(batch)
            stage.advance(len(batch))


def _hidden_rebuild(*, progress: Progress, now_ms: int) -> int:
    """Every hidden item back in its user's hidden set; returns how many."""
    hidden_rows = InboxHidden.objects.values_list("user_id", "item_id")
    hidden = 0
    with progress.stage("hidden items", hidden_rows.count()) as stage:
        for user_id, item_id in hidden_rows.iterator(chunk_size=BATCH):
            publish.user_hidden_add(user_id=user_id, ref=item_id, now_ms=now_ms)
            hidden += 1
            stage.advance()
    return hidden


def _messages_rebuild(*, progress: Progress, now: datetime) -> int:
    """Every message that reached its audience and has not expired, delivered
    again as it was (pull: registered; push: its detail and its fan-out
    chunks); returns how many."""
    messages = 0
    chunk = int(settings.MESSAGECENTER_FANOUT_CHUNK)
    # Scheduled and cancelled messages reached nobody: nothing of theirs is in Redis.
    live = (
        Message.objects.exclude(status__in=[MessageStatus.RETRACTED, MessageStatus.SCHEDULED, MessageStatus.CANCELLED])
        .exclude(expire_at__lte=now)
        .select_related("sender")
    )
    with progress.stage("messages", live.count()) as stage:
        for message in live.iterator(chunk_size=BATCH):
            entry = message_entry(message)
            detail = message_detail(message)
            if message.delivery == DeliveryMode.PULL:
                inbox_publish_pull(entry=entry, detail=detail, audience=None if message.everyone else message.audience)
            else:
                audience = message.audience
                publish.item_detail_put(ref=entry.ref, detail=detail)
                for index in range(math.ceil(len(audience) / chunk)):
                    inbox_deliver(entry=entry, user_ids=list(audience[index * chunk : (index + 1) * chunk]), now=now)
            messages += 1
            stage.advance()
    return messages


def _rows_stage(*, progress: Progress, name: str, rows: Any, project: Callable[[list[Any]], None]) -> int:
    """One stage that streams these (user, ...) rows, ordered by user, to
    ``project`` BATCH rows a call; returns how many rows."""
    done = 0
    with progress.stage(name, rows.count()) as stage:
        pairs: list[Any] = []
        for pair in rows.iterator(chunk_size=BATCH):
            pairs.append(pair)
            if len(pairs) >= BATCH:
                project(pairs)
                stage.advance(len(pairs))
                done, pairs = done + len(pairs), []
        project(pairs)
        stage.advance(len(pairs))
        done += len(pairs)
    return done
