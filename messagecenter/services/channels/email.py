"""E-mail when still unread: one e-mail per recipient who has not read,
archived or deleted an item some time after it was sent.

Nothing is scheduled per recipient. An item that asked for it has one
``ItemChannels`` row with ``email_due_at``; beat's scan
(``channels_email_scan``) takes due rows and walks each item's audience in
user-id order, a batch (``MESSAGECENTER_CHANNEL_SCAN_BATCH``) at a time,
against the read state (``recipients.screen``). Per batch: who has read it
is counted as skipped; who chose ``"digest"`` for the category, or is over
the hourly cap, is deferred (the digest shows what is still unread); who is
in quiet hours is held; the rest are claimed by moving the row's cursor past
the batch with a conditional UPDATE (one scan wins a batch, the other stops)
and then mailed. A worker that dies between the claim and the sends loses
those e-mails rather than sending any twice, as the digests do. An item
retracted, withdrawn or expired ends its scan with nothing sent.
"""

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core import signing
from django.core.mail import EmailMultiAlternatives, get_connection
from django.db.models import F
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext
from redis.exceptions import RedisError

from core.api.errors import ValidationFailed
from insight import metrics
from messagecenter import channel_prefs
from messagecenter.emails import absolute_url, email_items
from messagecenter.labels import CATEGORY_LABELS
from messagecenter.models import CATEGORIES, ItemChannels
from messagecenter.services.channels.limits import holds_record, limits_apply
from messagecenter.services.channels.recipients import ChannelItem, Recipient, audience_after, channel_item, screen

logger = logging.getLogger(__name__)

UNSUBSCRIBE_SALT = "messagecenter.channel.unsubscribe"
ALL_CATEGORIES = "*"
# Due items one scan takes at most (the next run goes on).
SCAN_ITEMS = 100


# --- one-click unsubscribe ---------------------------------------------------------


def channel_unsubscribe_token(*, user_id: int, category: str) -> str:
    """A signed token naming the user and the category (``*``: every category); no expiry."""
    return signing.dumps({"u": user_id, "c": category}, salt=UNSUBSCRIBE_SALT)


def channel_token_user(*, token: str) -> tuple[AbstractBaseUser, str]:
    """The user and category a token names; a forged or altered token is a 400."""
    try:
        payload = signing.loads(token, salt=UNSUBSCRIBE_SALT)
        user_id, category = int(payload["u"]), str(payload["c"])
    except (signing.BadSignature, KeyError, TypeError, ValueError) as exc:
        raise ValidationFailed("This unsubscribe link is not valid.", code="invalid_token") from exc
    user = get_user_model().objects.filter(pk=user_id).first()
    if user is None or (category != ALL_CATEGORIES and category not in CATEGORIES):
        raise ValidationFailed("This unsubscribe link is not valid.", code="invalid_token")
    return user, category


# --- rendering ------------------------------------------------------------------------


def _language(recipient: Recipient) -> str:
    codes = {code for code, _name in settings.LANGUAGES}
    return recipient.language if recipient.language in codes else str(settings.LANGUAGE_CODE)


def channel_email(*, recipient: Recipient, items: Sequence[ChannelItem], summary: bool) -> EmailMultiAlternatives:
    """The e-mail about one item, or (``summary``) about what quiet hours held,
    in the recipient's language (the items' translations too)."""
    items = [item.in_language(_language(recipient)) for item in items]
    category = items[0].category if len(items) == 1 and not summary else ALL_CATEGORIES
    unsubscribe_url = absolute_url(
        reverse(
            "messagecenter:channel-unsubscribe",
            args=[channel_unsubscribe_token(user_id=recipient.user_id, category=category)],
        )
    )
    with translation.override(_language(recipient)):
        context: dict[str, Any] = {
            "summary": summary,
            "items": email_items(items, ref=lambda item: item.ref),
            "inbox_url": absolute_url(reverse("messagecenter:inbox")),
            "settings_url": absolute_url(reverse("messagecenter:settings")),
            "unsubscribe_url": unsubscribe_url,
            "category_label": str(CATEGORY_LABELS.get(category, "")) if category != ALL_CATEGORIES else "",
        }
        if summary:
            subject = gettext("While you were away: %(count)d unread in your inbox") % {"count": len(items)}
        else:
            subject = gettext("Unread: %(title)s") % {"title": items[0].title}
        text = render_to_string("messagecenter/email/channel_item.txt", context)
        html = render_to_string("messagecenter/email/channel_item.html", context)
    message = EmailMultiAlternatives(
        subject=subject,
        body=text,
        to=[recipient.email],
        headers={
            # RFC 2369 and RFC 8058, as the digests: a client's "unsubscribe"
            # POSTs List-Unsubscribe=One-Click to this address, without a login.
            "List-Unsubscribe": f"<{unsubscribe_url}>",
            "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
        },
    )
    message.attach_alternative(html, "text/html")
    return message


def emails_send(messages: Sequence[EmailMultiAlternatives]) -> int:
    """Send over one connection; a refused address or a failure of one e-mail
    is that e-mail's alone (counted, logged). Returns how many went."""
    if not messages:
        return 0
    sent = 0
    connection = get_connection(fail_silently=False)
    try:
        connection.open()
        for message in messages:
            message.connection = connection
            try:
                sent += message.send(fail_silently=False)
            except Exception:
                logger.exception("channel e-mail to %s failed", message.to)
                metrics.EMAIL_FAILURES.inc()
    except Exception:
        logger.exception("channel e-mails: the mail server could not be reached")
        metrics.EMAIL_FAILURES.inc(len(messages) - sent)
    finally:
        try:
            connection.close()
        except Exception:
            logger.warning("channel e-mails: closing the connection failed", exc_info=True)
    return sent


# --- the scan ---------------------------------------------------------------------------


@dataclass
class ScanRun:
    items: int = 0
    looked_at: int = 0
    sent: int = 0
    skipped_read: int = 0
    deferred: int = 0
    held: int = 0


def _finish(channels: ItemChannels) -> None:
    ItemChannels.objects.filter(pk=channels.pk).update(email_done=True)


def _scan_batch(channels: ItemChannels, item: ChannelItem, *, now: datetime, run: ScanRun) -> bool:
    """One batch of the item's audience; False when the scan is over (the end,
    or another scan took this batch)."""
    after = int(channels.email_after_user)
    user_ids = audience_after(item, after=after, size=int(settings.MESSAGECENTER_CHANNEL_SCAN_BATCH))
    if not user_ids:
        _finish(channels)
        return False
    screened = screen(item, user_ids)
    wanting: list[Recipient] = []
    deferred = 0
    for recipient in screened.recipients:
        if not recipient.email:
            continue
        mode = channel_prefs.email_mode(recipient.channels, item.category)
        if mode == channel_prefs.EMAIL_IF_UNREAD:
            wanting.append(recipient)
        elif mode == channel_prefs.EMAIL_DIGEST:
            deferred += 1
    limited = limits_apply(wanting, now=now)
    deferred += len(limited.deferred)
    # The claim: only the scan that still finds the cursor where it read it moves it.
    claimed = ItemChannels.objects.filter(pk=channels.pk, email_after_user=after).update(
        email_after_user=user_ids[-1],
        email_sent=F("email_sent") + len(limited.send),
        email_skipped_read=F("email_skipped_read") + screened.read,
        email_deferred=F("email_deferred") + deferred,
    )
    if not claimed:
        return False
    channels.email_after_user = user_ids[-1]
    holds_record(limited.held, since=channels.email_due_at or now)
    messages = [channel_email(recipient=r, items=[item], summary=False) for r in limited.send]
    sent = emails_send(messages)
    if sent < len(messages):
        ItemChannels.objects.filter(pk=channels.pk).update(email_sent=F("email_sent") - (len(messages) - sent))
    for outcome, count in (("sent", sent), ("skipped_read", screened.read), ("deferred", deferred)):
        metrics.CHANNEL_SENDS.labels(channel="email", outcome=outcome).inc(count)
    run.looked_at += len(user_ids)
    run.sent += sent
    run.skipped_read += screened.read
    run.deferred += deferred
    run.held += len(limited.held)
    return True


def channel_email_scan_item(
    *, channels: ItemChannels, now: datetime, deadline: float | None = None, run: ScanRun | None = None
) -> ScanRun:
    """Scan one due item until its end (or until ``deadline``, a monotonic
    time: the next run goes on from the cursor)."""
    run = run if run is not None else ScanRun()
    item = channel_item(channels.item_id)
    if item is None or not item.alive(now):
        _finish(channels)  # retracted, withdrawn, expired or deleted: no e-mail, ever
        return run
    while _scan_batch(channels, item, now=now, run=run):
        if deadline is not None and time.monotonic() >= deadline:
            break
    return run


def channels_email_scan(*, now: datetime | None = None, budget_seconds: float | None = None) -> ScanRun:
    """The scan (Celery beat, every MESSAGECENTER_CHANNEL_SCAN_SECONDS): every
    item whose delay has passed, within the time budget. Redis away (the read
    state): the run stops and the next one tries again from the cursors."""
    now = now or timezone.now()
    budget = float(settings.MESSAGECENTER_CHANNEL_SCAN_BUDGET_SECONDS if budget_seconds is None else budget_seconds)
    deadline = time.monotonic() + budget
    run = ScanRun()
    # mc_channels_due_idx serves this (partial on email_done = false).
    due = list(
        ItemChannels.objects.filter(email_done=False, email_due_at__lte=now).order_by("email_due_at", "pk")[:SCAN_ITEMS]
    )
    for channels in due:
        try:
            channel_email_scan_item(channels=channels, now=now, deadline=deadline, run=run)
        except RedisError:
            logger.warning("channel e-mail scan: Redis is away; the next run goes on")
            break
        run.items += 1
        if time.monotonic() >= deadline:
            break
    return run
