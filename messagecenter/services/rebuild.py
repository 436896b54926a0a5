"""Rebuild of the read model from PostgreSQL (after a Redis loss).

Restores the committed read state first (read and ever-read bit-sets, unseen
watermarks: every acknowledged mark), then groups, mute periods, hidden items, bulletins, message details,
pull items, push fan-outs, subscriber sets, live notifications, and last the
archived and snoozed items, all idempotently. Deliveries and merges count an item unread only when its
restored read bit is 0, so the unread counters come out as PostgreSQL implies.
"""

import math

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
    now_ms = to_ms(now)
    # Read state before any item lands in an inbox (restore.lua would correct
    # the counters of items merged meanwhile too, but this way it has none to walk).
    restored = inbox_read_restore(batch=BATCH, progress=progress)

    user_ids = sorted(set(UserGroupMembership.objects.values_list("user_id", flat=True)))
    with progress.stage("group memberships", len(user_ids)) as stage:
        for start in range(0, len(user_ids), BATCH):
            batch = user_ids[start : start + BATCH]
            projection.user_groups(batch)
            stage.advance(len(batch))

    # Mute periods before any item: the merges that follow on read consult them.
    muting = sorted(set(MutePeriod.objects.values_list("user_id", flat=True)))
    with progress.stage("mute periods", len(muting)) as stage:
        for start in range(0, len(muting), BATCH):
            batch = muting[start : start + BATCH]
            projection.user_mutes(batch)
            stage.advance(len(batch))

    hidden_rows = InboxHidden.objects.values_list("user_id", "item_id")
    hidden = 0
    with progress.stage("hidden items", hidden_rows.count()) as stage:
        for user_id, item_id in hidden_rows.iterator(chunk_size=BATCH):
            publish.user_hidden_add(user_id=user_id, ref=item_id, now_ms=now_ms)
            hidden += 1
            stage.advance()

    # Ended groups before the items: each item falls into the group it was in.
    with progress.stage("ended groups", 1) as stage:
        groups_rebuild()
        stage.advance()

    bulletin_ids = list(Bulletin.objects.values_list("pk", flat=True))
    with progress.stage("bulletins", len(bulletin_ids)) as stage:
        for bulletin_id in bulletin_ids:
            projection.bulletins([bulletin_id], edit=False)
            stage.advance()

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

    with progress.stage("subscriptions and notifications", 1) as stage:
        notifications = notification_rebuild(now=now)
        stage.advance()

    # Archived and snoozed items, once every item is back (an item not merged
    # yet is parked directly) and after the read state (a snooze
    # clears a read bit: its bitmap must not be created before the restore).
    state_rows = InboxItemState.objects.order_by("user_id").values_list("user_id", "item_id")
    states = 0
    with progress.stage("archived and snoozed items", state_rows.count()) as stage:
        pairs: list[tuple[int, str]] = []
        for pair in state_rows.iterator(chunk_size=BATCH):
            pairs.append(pair)
            if len(pairs) >= BATCH:
                projection.item_places(pairs)
                stage.advance(len(pairs))
                states, pairs = states + len(pairs), []
        projection.item_places(pairs)
        stage.advance(len(pairs))
        states += len(pairs)
    # Answers to actions: each user's responses hash (pages show them without SQL).
    answer_rows = MessageResponse.objects.order_by("user_id").values_list("user_id", "message_id")
    answers = 0
    with progress.stage("answers to actions", answer_rows.count()) as stage:
        answered: list[tuple[int, int]] = []
        for answer in answer_rows.iterator(chunk_size=BATCH):
            answered.append(answer)
            if len(answered) >= BATCH:
                projection.responses(answered)
                stage.advance(len(answered))
                answers, answered = answers + len(answered), []
        projection.responses(answered)
        stage.advance(len(answered))
        answers += len(answered)
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
