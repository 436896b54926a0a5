"""The end of quiet hours: one summary push and one summary e-mail of what
they held and is still unread.

A hold is one row per user (``ChannelHold``: since, until), never a row per
held item: what was held is found again from the items themselves. Pushes
held are those of items sent between ``since`` and ``until`` that asked for
a push; e-mails held, those of items whose delay ended in that span and
whose scan has passed the user. Each is looked at again now (retracted,
expired, read, archived, deleted, muted, the user's choice for its category)
before it joins the summary. The summaries count against the hourly cap like
any push or e-mail.
"""

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F, Q
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext, ngettext, override

from insight import metrics
from messagecenter import channel_prefs
from messagecenter.models import ChannelHold, ItemChannels, PushSubscription
from messagecenter.readmodel.channels import channel_sends_take
from messagecenter.services.channels.email import channel_email, emails_send
from messagecenter.services.channels.limits import hour_of
from messagecenter.services.channels.plan import EMAIL_AFTER_MAX
from messagecenter.services.channels.push import Push, pushes_record, pushes_send
from messagecenter.services.channels.recipients import ChannelItem, Recipient, channel_item, screen

logger = logging.getLogger(__name__)

RELEASE_BATCH = 200


def _held_kinds(hold: ChannelHold, row: ItemChannels, user_id: int) -> tuple[bool, bool]:
    """(push held, e-mail held) for this item's channels row."""
    push = row.web_push and hold.since <= row.created_at <= hold.until
    email = (
        row.email_due_at is not None
        and hold.since <= row.email_due_at <= hold.until
        and (row.email_done or int(row.email_after_user) >= user_id)
    )
    return bool(push), bool(email)


def _held_recipient(item: ChannelItem | None, user_id: int, now: datetime) -> Recipient | None:
    """The user as a recipient of the item now, or None when it no longer reaches them."""
    if item is None or not item.alive(now) or not item.addressed_to(user_id):
        return None
    screened = screen(item, [user_id])
    return screened.recipients[0] if screened.recipients else None


def _held_items(
    hold: ChannelHold, rows: Sequence[ItemChannels], items: dict[str, ChannelItem | None], now: datetime
) -> tuple[list[tuple[ChannelItem, Recipient]], list[tuple[ChannelItem, Recipient]]]:
    """(held pushes, held e-mails) still wanted now, newest first."""
    user_id = int(hold.user_id)
    pushes: list[tuple[ChannelItem, Recipient]] = []
    emails: list[tuple[ChannelItem, Recipient]] = []
    for row in rows:
        push, email = _held_kinds(hold, row, user_id)
        if not (push or email):
            continue
        if row.item_id not in items:
            items[row.item_id] = channel_item(row.item_id)
        item = items[row.item_id]
        recipient = _held_recipient(item, user_id, now)
        if item is None or recipient is None:
            continue
        if push and channel_prefs.wants_push(recipient.channels, item.category):
            pushes.append((item, recipient))
        if (
            email
            and recipient.email
            and channel_prefs.email_mode(recipient.channels, item.category) == channel_prefs.EMAIL_IF_UNREAD
        ):
            emails.append((item, recipient))
    newest_first = sorted(pushes, key=lambda pair: pair[0].created_at, reverse=True)
    return newest_first, sorted(emails, key=lambda pair: pair[0].created_at, reverse=True)


def _summary_payload(items: Sequence[ChannelItem], language: str) -> dict[str, str]:
    newest = items[0].in_language(language)
    if len(items) == 1:
        return {
            "id": newest.ref,
            "title": newest.title,
            "summary": newest.summary,
            "url": reverse("messagecenter:item", args=[newest.ref]),
        }
    with override(language):
        title = ngettext(
            "%(count)d new item while you were away", "%(count)d new items while you were away", len(items)
        ) % {"count": len(items)}
        more = gettext("and %(count)d more") % {"count": len(items) - 1}
    return {
        "id": newest.ref,
        "title": title,
        "summary": f"{newest.title} {more}",
        "url": reverse("messagecenter:inbox"),
    }


def _count(refs: Sequence[str], **fields: int) -> None:
    if refs and fields:
        ItemChannels.objects.filter(item_id__in=list(refs)).update(**{k: F(k) + v for k, v in fields.items()})


def _release_push(user_id: int, held: Sequence[tuple[ChannelItem, Recipient]], now: datetime) -> None:
    subscriptions = list(PushSubscription.objects.filter(user_id=user_id))
    if not held or not subscriptions:
        return
    items = [item for item, _ in held]
    refs = [item.ref for item in items]
    if user_id not in channel_sends_take(user_ids=[user_id], hour=hour_of(now), cap=_cap()):
        metrics.CHANNEL_SENDS.labels(channel="web_push", outcome="deferred").inc()
        return
    payload = _summary_payload(items, held[0][1].language or "en")
    pushes = [
        Push(subscription=s, payload=payload, ttl=24 * 60 * 60, urgency="normal", topic="summary")
        for s in subscriptions
    ]
    outcome = pushes_record(pushes, pushes_send(pushes), item_id=f"summary:{items[0].ref}")
    if outcome.sent:
        _count(refs, push_sent=1)


def _release_email(held: Sequence[tuple[ChannelItem, Recipient]], now: datetime) -> None:
    if not held:
        return
    recipient = held[0][1]
    refs = [item.ref for item, _ in held]
    if recipient.user_id not in channel_sends_take(user_ids=[recipient.user_id], hour=hour_of(now), cap=_cap()):
        _count(refs, email_deferred=1)
        metrics.CHANNEL_SENDS.labels(channel="email", outcome="deferred").inc(len(refs))
        return
    if emails_send([channel_email(recipient=recipient, items=[item for item, _ in held], summary=True)]):
        _count(refs, email_sent=1)
        metrics.CHANNEL_SENDS.labels(channel="email", outcome="sent").inc(len(refs))


def _cap() -> int:
    return int(settings.MESSAGECENTER_CHANNEL_MAX_PER_HOUR)


def channels_quiet_release(*, now: datetime | None = None, limit: int = RELEASE_BATCH) -> int:
    """Release the holds whose quiet hours are over (Celery beat, every
    minute); returns how many users' holds were released."""
    now = now or timezone.now()
    # mc_channelhold_until_idx serves this.
    holds = list(ChannelHold.objects.filter(until__lte=now).order_by("until")[:limit])
    if not holds:
        return 0
    earliest = min(hold.since for hold in holds) - timedelta(seconds=EMAIL_AFTER_MAX)
    latest = max(hold.until for hold in holds)
    # mc_channels_created_idx serves the range; the items of the held span and
    # those whose e-mail delay ended in it (sent at most the longest delay before).
    rows = list(
        ItemChannels.objects.filter(created_at__gte=earliest, created_at__lte=latest).filter(
            Q(web_push=True) | Q(email_after_seconds__isnull=False)
        )
    )
    items: dict[str, ChannelItem | None] = {}
    for hold in holds:
        try:
            pushes, emails = _held_items(hold, rows, items, now)
            _release_push(int(hold.user_id), pushes, now)
            _release_email(emails, now)
        except Exception:
            logger.exception("quiet hours release of user %s failed", hold.user_id)
            continue
        # A hold written again meanwhile (quiet hours began anew) stays.
        ChannelHold.objects.filter(pk=hold.pk, until=hold.until).delete()
    return len(holds)
