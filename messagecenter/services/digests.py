"""E-mail digests: a reminder of the unread inbox items older than
MESSAGECENTER_DIGEST_MIN_AGE_HOURS, daily or weekly as each user chose.

One run (Celery beat, ``digests_send``) walks the users whose digest is due in
batches. For each it first *claims* the period with a conditional UPDATE of
``UserPreferences.last_digest_at`` (only while it is still older than the
period), then reads the inbox and sends. Two runs at once race on that row:
PostgreSQL re-checks the condition of the second UPDATE after the first one
commits, so exactly one of them sends; a user never gets two digests for one
period. A send that fails puts ``last_digest_at`` back, so the next run tries
again, and counts ``EMAIL_FAILURES``; the batch goes on. A user with nothing
old and unread keeps the claim: the inbox is looked at once per period.

Users who never chose (no preferences row, or one with a blank digest) follow
MESSAGECENTER_DIGEST_DEFAULT as it is at each run. While it is on, the run
gives those without a row a blank one, which records their sends without
making the default their choice: an operator who turns the default off stops
their digests, and only theirs. See docs/ARCHITECTURE.md, "E-mail digests".
"""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core import signing
from django.core.mail import EmailMultiAlternatives
from django.db.models import Q
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext

from core.api.errors import ValidationFailed
from core.api.translations import reader_language
from insight.metrics import EMAIL_FAILURES
from messagecenter.emails import absolute_url, email_items
from messagecenter.models import EmailDigest, UserPreferences
from messagecenter.selectors import InboxItem, inbox_list, preferences_get
from messagecenter.services.preferences import preferences_update

logger = logging.getLogger(__name__)

PERIODS: dict[str, timedelta] = {
    EmailDigest.DAILY.value: timedelta(days=1),
    EmailDigest.WEEKLY.value: timedelta(days=7),
}
UNSUBSCRIBE_SALT = "messagecenter.digest.unsubscribe"
# Pages of unread items read per user while looking for old ones (newest come first).
MAX_PAGES = 20


@dataclass(frozen=True)
class DigestRun:
    sent: int = 0
    failed: int = 0
    empty: int = 0


def digest_unsubscribe_token(*, user_id: int) -> str:
    """A signed token naming the user; it never expires (old e-mails must keep working)."""
    return signing.dumps({"u": user_id}, salt=UNSUBSCRIBE_SALT)


def digest_token_user(*, token: str) -> AbstractBaseUser:
    """The user a token names; a forged, altered or stale token is a 400."""
    try:
        payload = signing.loads(token, salt=UNSUBSCRIBE_SALT)
        user_id = int(payload["u"])
    except (signing.BadSignature, KeyError, TypeError, ValueError) as exc:
        raise ValidationFailed("This unsubscribe link is not valid.", code="invalid_token") from exc
    user = get_user_model().objects.filter(pk=user_id).first()
    if user is None:
        raise ValidationFailed("This unsubscribe link is not valid.", code="invalid_token")
    return user


def digest_unsubscribe(*, token: str) -> AbstractBaseUser:
    """Turn the digest of the token's user off (idempotent). Bad token: 400, nothing changes."""
    user = digest_token_user(token=token)
    preferences_update(user=user, email_digest=EmailDigest.OFF.value)
    return user


def digests_send(*, now: datetime | None = None) -> DigestRun:
    """Send every due digest; returns how many were sent, failed, or had nothing to say."""
    now = now or timezone.now()
    default = settings.MESSAGECENTER_DIGEST_DEFAULT
    _default_rows(default=default)
    due = Q()
    for mode, period in PERIODS.items():
        due |= Q(email_digest__in=_stored(mode, default)) & (
            Q(last_digest_at__isnull=True) | Q(last_digest_at__lte=now - period)
        )
    sent = failed = empty = 0
    after = 0
    batch_size = settings.MESSAGECENTER_DIGEST_BATCH
    while True:
        # mc_prefs_digest_on_idx serves the walk: only rows with a digest on (or
        # blank, following the default), by user id.
        rows = list(
            UserPreferences.objects.filter(due, user_id__gt=after)
            .filter(user__is_active=True)
            .exclude(user__email="")
            .order_by("user_id")
            .values_list("user_id", "email_digest", "last_digest_at")[:batch_size]
        )
        if not rows:
            break
        after = rows[-1][0]
        users = get_user_model().objects.in_bulk([row[0] for row in rows])
        for user_id, stored, previous in rows:
            user = users.get(user_id)
            mode = stored or default
            if user is None or not _claim(user_id=user_id, stored=stored, mode=mode, now=now):
                continue
            outcome = _send_one(user=user, mode=mode, now=now, previous=previous)
            sent += outcome == "sent"
            failed += outcome == "failed"
            empty += outcome == "empty"
        if len(rows) < batch_size:
            break
    if sent or failed:
        logger.info("digests: %d sent, %d failed, %d with nothing to send", sent, failed, empty)
    return DigestRun(sent=sent, failed=failed, empty=empty)


def _stored(mode: str, default: str) -> list[str]:
    """The stored values that mean ``mode`` now: the choice itself, and blank
    (never chose) when it is the operator's default."""
    return [mode, ""] if mode == default else [mode]


def _default_rows(*, default: str) -> None:
    """While the default is on, users without a preferences row get a blank one
    (still following the default), so their sends are recorded like everyone's."""
    if default not in PERIODS:
        return
    batch_size = settings.MESSAGECENTER_DIGEST_BATCH
    users = get_user_model().objects.filter(mc_preferences__isnull=True, is_active=True).exclude(email="")
    while True:
        ids = list(users.order_by("pk").values_list("pk", flat=True)[:batch_size])
        if not ids:
            return
        # ignore_conflicts: a user who saved preferences meanwhile keeps them.
        UserPreferences.objects.bulk_create(
            [UserPreferences(user_id=pk, email_digest="") for pk in ids], ignore_conflicts=True
        )


def _claim(*, user_id: int, stored: str, mode: str, now: datetime) -> bool:
    """Take this period for the user: true for exactly one concurrent run, and
    false when the user changed their choice since the row was listed."""
    window = Q(last_digest_at__isnull=True) | Q(last_digest_at__lte=now - PERIODS[mode])
    return UserPreferences.objects.filter(window, pk=user_id, email_digest=stored).update(last_digest_at=now) == 1


def _release(*, user_id: int, now: datetime, previous: datetime | None) -> None:
    """Give the claim back after a failed send, unless another run took it since."""
    UserPreferences.objects.filter(pk=user_id, last_digest_at=now).update(last_digest_at=previous)


def _old_unread(*, user: AbstractBaseUser, now: datetime) -> tuple[list[InboxItem], int]:
    """The user's unread items older than the minimum age, newest first, at most
    MESSAGECENTER_DIGEST_MAX_ITEMS, and the inbox's unread count. Read through
    the inbox selector (Redis, PostgreSQL when Redis is away), which already
    hides muted items; muted categories are dropped here again all the same."""
    cutoff = now - timedelta(hours=settings.MESSAGECENTER_DIGEST_MIN_AGE_HOURS)
    muted = set(preferences_get(user_id=int(user.pk)).muted_categories)
    wanted = settings.MESSAGECENTER_DIGEST_MAX_ITEMS
    items: list[InboxItem] = []
    cursor: str | None = None
    unread = 0
    for index in range(MAX_PAGES):
        page = inbox_list(
            user=user,
            unread_only=True,
            limit=settings.MESSAGECENTER_MAX_PAGE_SIZE,
            cursor=cursor,
            now=now,
            language=reader_language(None, int(user.pk)),
        )
        if index == 0:
            unread = page.unread_count
        items.extend(i for i in page.results if i.created_at <= cutoff and i.category not in muted)
        cursor = page.next_cursor
        if len(items) >= wanted or cursor is None:
            break
    return items[:wanted], unread


def _send_one(*, user: AbstractBaseUser, mode: str, now: datetime, previous: datetime | None) -> str:
    user_id = int(user.pk)
    try:
        items, unread = _old_unread(user=user, now=now)
    except Exception:
        # The inbox could not be read at all (Redis and its fallback both
        # failed): no e-mail was tried; the next run tries again.
        logger.exception("digest of user %s: inbox not readable", user_id)
        _release(user_id=user_id, now=now, previous=previous)
        return "failed"
    if not items:
        return "empty"
    try:
        _message(user=user, mode=mode, items=items, unread=unread).send(fail_silently=False)
    except Exception:
        # Any sending failure (a refused address, a dropped connection, a
        # rendering bug) is this user's alone: count it, retry next run.
        logger.exception("digest e-mail to user %s failed", user_id)
        EMAIL_FAILURES.inc()
        _release(user_id=user_id, now=now, previous=previous)
        return "failed"
    return "sent"


def _message(*, user: AbstractBaseUser, mode: str, items: list[InboxItem], unread: int) -> EmailMultiAlternatives:
    unsubscribe_url = absolute_url(
        reverse("messagecenter:digest-unsubscribe", args=[digest_unsubscribe_token(user_id=int(user.pk))])
    )
    with translation.override(settings.LANGUAGE_CODE):
        context: dict[str, Any] = {
            "user": user,
            "weekly": mode == EmailDigest.WEEKLY.value,
            "items": email_items(items, ref=lambda item: item.id),
            "unread": unread,
            "inbox_url": absolute_url(reverse("messagecenter:inbox")),
            "settings_url": absolute_url(reverse("messagecenter:settings")),
            "unsubscribe_url": unsubscribe_url,
        }
        subject = gettext("Your weekly inbox digest") if context["weekly"] else gettext("Your daily inbox digest")
        text = render_to_string("messagecenter/email/digest.txt", context)
        html = render_to_string("messagecenter/email/digest.html", context)
    message = EmailMultiAlternatives(
        subject=subject,
        body=text,
        to=[str(getattr(user, "email", ""))],
        headers={
            # RFC 2369 and RFC 8058: mail clients offer "unsubscribe" and POST
            # "List-Unsubscribe=One-Click" to this address, without a login.
            "List-Unsubscribe": f"<{unsubscribe_url}>",
            "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
        },
    )
    message.attach_alternative(html, "text/html")
    return message
