"""Web Push: the fan-out of an item to its recipients' subscriptions, and
retries of what failed.

A chunk of the fan-out (a pending delivery, ``services.delivery``) takes a
slice of the audience (or, for everyone, a range of subscription ids), drops
who read, archived, deleted or muted the item or turned pushes off for its
category, holds who is in quiet hours, defers who is over the hourly cap,
and pushes the rest together from one event loop (the pushes are HTTP waits).
A push service answering 404 or 410 has forgotten the subscription: the row
goes. Any other failure is written down as a ``PushDelivery`` in the
webhooks' shape and retried after ``WEBHOOK_RETRY_DELAYS`` by the same relay
(``webhooks.services.deliveries_relay``); a retry looks at the item and the
user again first, so nothing goes out for an item retracted, expired, read,
archived or muted since. A chunk run twice (a worker lost mid-chunk) pushes
twice: the push's Topic lets the push service replace the first if it still
waits, and the service worker shows one notification per item (its tag).
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

from core.api.lookups import Whole
from insight import metrics
from messagecenter import channel_prefs, webpush
from messagecenter.models import ItemChannels, PushDelivery, PushSubscription
from messagecenter.services.channels.limits import holds_record, limits_apply
from messagecenter.services.channels.recipients import ChannelItem, channel_item, screen
from messagecenter.webpush import Outgoing, PushResult
from webhooks import services as webhooks
from webhooks.models import WebhookDeliveryStatus

logger = logging.getLogger(__name__)

PUSH_DELIVER_TASK = "messagecenter.push_deliver"
# RFC 8030 Urgency per category: what a user waits for wakes the device now.
_URGENCY = {"transaction": "high", "interaction": "high", "system": "normal", "promotion": "low"}


def payload_of(item: ChannelItem) -> dict[str, Any]:
    """What the service worker shows: ``{"id", "title", "summary", "url"}`` (the item's page)."""
    return {
        "id": item.ref,
        "title": item.title,
        "summary": item.summary,
        "url": reverse("messagecenter:item", args=[item.ref]),
    }


def _ttl(item: ChannelItem, now: datetime) -> int:
    """How long the push service keeps a push for an offline device: the
    setting, and never past the item's expiry (after it the item is gone)."""
    ttl = int(settings.MESSAGECENTER_PUSH_TTL_SECONDS)
    if item.expire_at is not None:
        ttl = min(ttl, max(0, int((item.expire_at - now).total_seconds())))
    return ttl


@dataclass(frozen=True)
class Push:
    subscription: PushSubscription
    payload: dict[str, Any]
    ttl: int
    urgency: str
    topic: str

    @property
    def outgoing(self) -> Outgoing:
        s = self.subscription
        return Outgoing(s.endpoint, s.p256dh, s.auth, self.payload, self.ttl, self.urgency, self.topic)


def pushes_send(pushes: Sequence[Push]) -> list[PushResult]:
    """Encrypt and send the pushes (together: ``webpush.pushes_send``); results in order."""
    return webpush.pushes_send([push.outgoing for push in pushes])


@dataclass(frozen=True)
class PushOutcome:
    sent: int
    failed: int  # gone (404/410) or refused for good
    retrying: int


def pushes_record(pushes: Sequence[Push], results: Sequence[PushResult], *, item_id: str) -> PushOutcome:
    """Delete the subscriptions a push service forgot, write a retry for every
    other failure, count (Prometheus and the item's counters: one UPDATE)."""
    sent = failed = 0
    gone: list[int] = []
    retries: list[PushDelivery] = []
    now = timezone.now()
    first_delay = webhooks.retry_delay(attempts=1)
    for push, result in zip(pushes, results, strict=True):
        if result.ok:
            sent += 1
        elif result.gone:
            gone.append(int(push.subscription.pk))
            failed += 1
        elif first_delay is None:
            failed += 1
        else:
            retries.append(
                PushDelivery(
                    subscription_id=push.subscription.pk,
                    item_id=item_id,
                    payload={"body": push.payload, "ttl": push.ttl, "urgency": push.urgency, "topic": push.topic},
                    attempts=1,
                    next_attempt_at=now + timedelta(seconds=first_delay),
                    last_status_code=result.status,
                    last_error=result.error,
                )
            )
    with transaction.atomic():
        if gone:
            PushSubscription.objects.filter(pk__in=gone).delete()
        if retries:
            PushDelivery.objects.bulk_create(retries)
        if sent or failed:
            ItemChannels.objects.filter(item_id=item_id).update(
                push_sent=F("push_sent") + sent, push_failed=F("push_failed") + failed
            )
    metrics.CHANNEL_SENDS.labels(channel="web_push", outcome="sent").inc(sent)
    metrics.CHANNEL_SENDS.labels(channel="web_push", outcome="failed").inc(failed)
    metrics.CHANNEL_SENDS.labels(channel="web_push", outcome="retrying").inc(len(retries))
    return PushOutcome(sent=sent, failed=failed, retrying=len(retries))


def _subscriptions_of(item: ChannelItem, index: int) -> dict[int, list[PushSubscription]]:
    """The chunk's subscriptions by user: a slice of the audience (by the
    user index), or for everyone a range of subscription ids."""
    size = int(settings.MESSAGECENTER_PUSH_CHUNK)
    rows = PushSubscription.objects.order_by("user_id", "pk")
    if item.everyone:
        rows = rows.filter(pk__gt=index * size, pk__lte=(index + 1) * size)
    else:
        users = list(item.audience[index * size : (index + 1) * size])
        if not users:
            return {}
        rows = rows.filter(user_id__any_of=Whole(users))
    by_user: dict[int, list[PushSubscription]] = {}
    for subscription in rows.only("pk", "user_id", "endpoint", "p256dh", "auth"):
        by_user.setdefault(int(subscription.user_id), []).append(subscription)
    return by_user


def channel_push_chunk(*, channels: ItemChannels, index: int, now: datetime | None = None) -> int:
    """Push one chunk of the item's fan-out; returns the pushes sent."""
    now = now or timezone.now()
    item = channel_item(channels.item_id)
    if item is None or not item.alive(now):
        return 0
    by_user = _subscriptions_of(item, index)
    if not by_user:
        return 0
    screened = screen(item, sorted(by_user))
    wanting = [r for r in screened.recipients if channel_prefs.wants_push(r.channels, item.category)]
    limited = limits_apply(wanting, now=now)
    holds_record(limited.held, since=min(now, item.created_at))
    if limited.deferred:
        metrics.CHANNEL_SENDS.labels(channel="web_push", outcome="deferred").inc(len(limited.deferred))
    ttl = _ttl(item, now)
    urgency = _URGENCY.get(item.category, "normal")
    # One payload per language: each recipient reads the item in theirs.
    payloads: dict[str, dict[str, Any]] = {}
    for recipient in limited.send:
        if recipient.language not in payloads:
            payloads[recipient.language] = payload_of(item.in_language(recipient.language or None))
    pushes = [
        Push(subscription=s, payload=payloads[recipient.language], ttl=ttl, urgency=urgency, topic=item.ref)
        for recipient in limited.send
        for s in by_user[recipient.user_id]
    ]
    if not pushes:
        return 0
    return pushes_record(pushes, pushes_send(pushes), item_id=item.ref).sent


def channel_push_chunk_job(channels_id: int, index: int) -> int:
    """A pending chunk's row: reload the item's channels and push the chunk (0 when gone)."""
    channels = ItemChannels.objects.filter(pk=channels_id).first()
    return 0 if channels is None else channel_push_chunk(channels=channels, index=index)


# --- retries -------------------------------------------------------------------------


def _still_wanted(delivery: PushDelivery, now: datetime) -> str:
    """Why a retry no longer goes out ("" when it does): the item is gone, or
    its user read, archived, deleted or muted it, or turned pushes off."""
    if delivery.item_id.startswith("summary:"):
        return ""
    item = channel_item(delivery.item_id)
    if item is None or not item.alive(now):
        return "The item was retracted, withdrawn or expired."
    user_id = int(delivery.subscription.user_id)
    screened = screen(item, [user_id])
    if not screened.recipients:
        return "The user read, archived, deleted or muted the item."
    if not channel_prefs.wants_push(screened.recipients[0].channels, item.category):
        return "The user turned pushes off for this category."
    return ""


def _finish(delivery: PushDelivery, status: str, *, attempted: bool, code: int | None, error: str) -> None:
    PushDelivery.objects.filter(pk=delivery.pk).update(
        status=status,
        attempts=F("attempts") + (1 if attempted else 0),
        last_status_code=code,
        last_error=error[:500],
        finished_at=timezone.now(),
    )


def _count(item_id: str, *, sent: int = 0, failed: int = 0) -> None:
    if not item_id.startswith("summary:"):
        ItemChannels.objects.filter(item_id=item_id).update(
            push_sent=F("push_sent") + sent, push_failed=F("push_failed") + failed
        )
    if sent:
        metrics.CHANNEL_SENDS.labels(channel="web_push", outcome="sent").inc(sent)
    if failed:
        metrics.CHANNEL_SENDS.labels(channel="web_push", outcome="failed").inc(failed)


def push_deliver(*, delivery_id: int, now: datetime | None = None) -> str:
    """One more attempt of a failed push (the task's body). Returns the
    status after it; a finished or deleted delivery changes nothing."""
    now = now or timezone.now()
    delivery = PushDelivery.objects.select_related("subscription").filter(pk=delivery_id).first()
    if delivery is None or delivery.status != WebhookDeliveryStatus.PENDING:
        return "gone" if delivery is None else delivery.status
    reason = _still_wanted(delivery, now)
    if reason:
        _finish(delivery, WebhookDeliveryStatus.FAILED, attempted=False, code=None, error=f"Not sent: {reason}")
        return WebhookDeliveryStatus.FAILED
    body = dict(delivery.payload)
    push = Push(
        subscription=delivery.subscription,
        payload=dict(body.get("body") or {}),
        ttl=int(body.get("ttl") or 0),
        urgency=str(body.get("urgency") or "normal"),
        topic=str(body.get("topic") or delivery.item_id)[:32],
    )
    (result,) = pushes_send([push])
    if result.ok:
        _finish(delivery, WebhookDeliveryStatus.SUCCEEDED, attempted=True, code=result.status, error="")
        _count(delivery.item_id, sent=1)
        return WebhookDeliveryStatus.SUCCEEDED
    if result.gone:
        item_id = delivery.item_id
        PushSubscription.objects.filter(pk=delivery.subscription_id).delete()  # its deliveries go with it
        _count(item_id, failed=1)
        return "gone"
    attempts = int(delivery.attempts) + 1
    delay = webhooks.retry_delay(attempts=attempts)
    if delay is None:
        _finish(delivery, WebhookDeliveryStatus.FAILED, attempted=True, code=result.status, error=result.error)
        _count(delivery.item_id, failed=1)
        return WebhookDeliveryStatus.FAILED
    PushDelivery.objects.filter(pk=delivery.pk).update(
        attempts=attempts,
        last_status_code=result.status,
        last_error=result.error[:500],
        next_attempt_at=now + timedelta(seconds=delay),
    )
    return WebhookDeliveryStatus.PENDING


def push_relay(*, limit: int = 100) -> int:
    """Hand due push retries to the workers: the webhooks' relay on our rows."""
    return webhooks.deliveries_relay(model=PushDelivery, task=PUSH_DELIVER_TASK, limit=limit)
