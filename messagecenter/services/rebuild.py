"""Rebuild of the read model from PostgreSQL (after a Redis loss).

Restores groups, hidden items, bulletins, message details, pull items,
push fan-outs, subscriber sets and live notifications, all idempotently. Read marks live in Redis bitmaps only;
durable snapshots of them arrive with a later issue, so a rebuild from an
empty Redis shows every item unread.
"""

import math

from django.conf import settings
from django.utils import timezone

from messagecenter.items import message_detail, message_entry
from messagecenter.models import Bulletin, DeliveryMode, InboxHidden, Message, MessageStatus, UserGroupMembership
from messagecenter.readmodel import publish, to_ms
from messagecenter.services.inbox import inbox_deliver, inbox_publish_pull

BATCH = 1000


def inbox_rebuild() -> dict[str, int]:
    """Mirror everything PostgreSQL holds into Redis; returns what was touched."""
    from messagecenter.signals import mirror_bulletin, mirror_user_groups

    now = timezone.now()
    now_ms = to_ms(now)
    user_ids = sorted(set(UserGroupMembership.objects.values_list("user_id", flat=True)))
    for start in range(0, len(user_ids), BATCH):
        mirror_user_groups(user_ids[start : start + BATCH])
    hidden = 0
    for user_id, item_id in InboxHidden.objects.values_list("user_id", "item_id").iterator():
        publish.user_hidden_add(user_id=user_id, ref=item_id, now_ms=now_ms)
        hidden += 1
    bulletins = 0
    for bulletin_id in Bulletin.objects.values_list("pk", flat=True):
        mirror_bulletin(bulletin_id, edit=False)
        bulletins += 1
    messages = 0
    chunk = int(settings.MESSAGECENTER_FANOUT_CHUNK)
    live = Message.objects.exclude(status=MessageStatus.RETRACTED).exclude(expire_at__lte=now)
    for message in live.iterator():
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
    from messagecenter.services.notifications import notification_rebuild

    notifications = notification_rebuild(now=now)
    return {"users": len(user_ids), "hidden": hidden, "bulletins": bulletins, "messages": messages, **notifications}
