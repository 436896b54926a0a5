"""Write use cases of announcements.

PostgreSQL is written here; the Redis read model follows after commit through
``notices.projection`` (indexes; asked by the receivers in ``notices.signals``
and, for a new announcement, by ``announcement_create``) and ``readmodel.mark``
(read bits, after the mark's ``AnnouncementRead`` rows committed).

Multi-platform users: marking read sets the user's bit in *every* platform of
the user that the announcement targets, and marking unread clears all of them.
Reads take the OR of those bits, so an announcement a user reaches through two
platforms is counted once and reads the same from either.
"""

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.utils import timezone
from redis.exceptions import RedisError

from accounts.platforms import clean_platforms
from accounts.selectors import user_platforms
from core.api.errors import NotFound, ValidationFailed
from core.api.translations import translations_validate
from core.html import sanitize_html, summarize
from durability import outbox
from notices import projection, readmodel
from notices.models import MAX_ID, Announcement, AnnouncementPlatform
from notices.read_rows import announcement_reads_set
from notices.selectors import READ_TOPIC
from webhooks import services as webhooks

logger = logging.getLogger(__name__)

UPDATABLE_FIELDS = frozenset(
    {"title", "summary", "body_html", "platforms", "publish_at", "expire_at", "pinned", "translations"}
)
SUMMARY_LENGTH = 160  # derived summaries
SUMMARY_MAX_LENGTH = 300  # Announcement.summary max_length
TITLE_LENGTH = 200


def _clean_platforms(platforms: Any) -> list[str]:
    return clean_platforms(platforms, empty_message="An announcement needs at least one platform.")


def _check_times(*, publish_at: datetime, expire_at: datetime | None) -> None:
    for name, value in (("publish_at", publish_at), ("expire_at", expire_at)):
        if value is not None and not isinstance(value, datetime):
            raise ValidationFailed(f"{name} must be a time.", fields={name: ["Must be a time."]})
        if value is not None and timezone.is_naive(value):
            raise ValidationFailed(f"{name} needs a time zone.", fields={name: ["Give a time zone offset."]})
    if expire_at is not None and expire_at <= publish_at:
        raise ValidationFailed(
            "expire_at must be after publish_at.", fields={"expire_at": ["Must be after publish_at."]}
        )


def _check_text(*, title: str, body_html: str, summary: str = "") -> None:
    if not isinstance(title, str) or not isinstance(body_html, str) or not isinstance(summary, str):
        raise ValidationFailed("title, summary and body_html must be text.")
    if len(title.strip()) > TITLE_LENGTH:
        raise ValidationFailed("The title is too long.", fields={"title": [f"At most {TITLE_LENGTH} characters."]})
    if len(summary.strip()) > SUMMARY_MAX_LENGTH:
        raise ValidationFailed(
            "The summary is too long.", fields={"summary": [f"At most {SUMMARY_MAX_LENGTH} characters."]}
        )
    if not title.strip():
        raise ValidationFailed("A title is required.", fields={"title": ["This field may not be blank."]})
    if not body_html.strip():
        raise ValidationFailed("A body is required.", fields={"body_html": ["This field may not be blank."]})


def _set_platforms(*, announcement: Announcement, platforms: list[str], created: bool = False) -> None:
    # A new announcement has no rows yet: no SELECT on the publish path.
    current = set() if created else set(announcement.platform_rows.values_list("platform", flat=True))
    for row in announcement.platform_rows.filter(platform__in=current - set(platforms)):
        row.delete()  # one by one: each post_delete drops that platform's bitmaps
    for platform in platforms:
        if platform not in current:
            AnnouncementPlatform.objects.create(announcement=announcement, platform=platform)


def announcement_create(
    *,
    author: AbstractBaseUser | AnonymousUser | None,
    title: str,
    body_html: str,
    platforms: Iterable[str],
    publish_at: datetime | None = None,
    expire_at: datetime | None = None,
    pinned: bool = False,
    summary: str = "",
    translations: Mapping[str, Any] | None = None,
) -> Announcement:
    """Create an announcement; published at ``publish_at`` (now when None), visible
    until ``expire_at``. The body is sanitised, the summary derived when empty.

    Validation writes nothing; the writes are atomic (without a savepoint
    of their own: an error in them aborts the caller's transaction)."""
    clean_platforms = _clean_platforms(platforms)
    publish_at = publish_at or timezone.now()
    _check_times(publish_at=publish_at, expire_at=expire_at)
    _check_text(title=title, body_html=body_html, summary=summary or "")
    body = sanitize_html(body_html)
    localized = translations_validate(translations) if translations is not None else {}
    with transaction.atomic(savepoint=False):
        announcement = Announcement.objects.create(
            author_id=author.pk if author is not None and author.is_authenticated else None,
            title=title.strip(),
            summary=(summary or "").strip() or summarize(body, length=SUMMARY_LENGTH),
            body_html=body,
            publish_at=publish_at,
            expire_at=expire_at,
            pinned=bool(pinned),
            translations=localized,
        )
        _set_platforms(announcement=announcement, platforms=clean_platforms, created=True)
        # Its rows went in with the announcement, in this transaction and with
        # exactly these times: the run at commit may add the entry to each
        # index instead of rebuilding it.
        projection.announcement_created(announcement, platforms=clean_platforms)
        webhooks.webhook_emit(
            event="announcement.published",
            data={
                "id": str(announcement.pk),
                "title": announcement.title,
                "platforms": clean_platforms,
                "publish_at": announcement.publish_at.isoformat(),
            },
        )
    return announcement


@transaction.atomic
def announcement_update(*, announcement: Announcement, **fields: Any) -> Announcement:
    """Change any of title, summary, body_html, platforms, publish_at, expire_at,
    pinned, translations (replaced whole: {} drops them).

    Validation happens before anything is written; an invalid change changes nothing.
    """
    unknown = set(fields) - UPDATABLE_FIELDS
    if unknown:
        raise ValidationFailed(f"Unknown field(s): {', '.join(sorted(unknown))}.")
    platforms = _clean_platforms(fields["platforms"]) if "platforms" in fields else None
    publish_at = fields.get("publish_at", announcement.publish_at) or timezone.now()
    expire_at = fields.get("expire_at", announcement.expire_at)
    _check_times(publish_at=publish_at, expire_at=expire_at)
    title = fields.get("title", announcement.title)
    _check_text(
        title=title, body_html=fields.get("body_html", announcement.body_html), summary=fields.get("summary") or ""
    )
    body = sanitize_html(fields["body_html"]) if "body_html" in fields else announcement.body_html
    if "translations" in fields:
        announcement.translations = translations_validate(fields["translations"])

    old_summary_derived = announcement.summary == summarize(announcement.body_html, length=SUMMARY_LENGTH)
    announcement.title = title.strip()
    announcement.body_html = body
    if "summary" in fields:
        announcement.summary = (fields["summary"] or "").strip() or summarize(body, length=SUMMARY_LENGTH)
    elif "body_html" in fields and old_summary_derived:
        # A new body re-derives a summary that was derived, keeps one that was written.
        announcement.summary = summarize(body, length=SUMMARY_LENGTH)
    announcement.publish_at = publish_at
    announcement.expire_at = expire_at
    if "pinned" in fields:
        announcement.pinned = bool(fields["pinned"])
    announcement.save()
    if platforms is not None:
        _set_platforms(announcement=announcement, platforms=platforms)
    return announcement


@transaction.atomic
def announcement_delete(*, announcement: Announcement) -> None:
    """Delete it; after commit its ids leave every index and its bitmaps are dropped."""
    announcement.delete()


def announcement_publish_now(*, announcement: Announcement) -> Announcement:
    """Make a scheduled or expired announcement live from now on (admin action)."""
    now = timezone.now()
    expire_at = announcement.expire_at if announcement.expire_at and announcement.expire_at > now else None
    return announcement_update(announcement=announcement, publish_at=now, expire_at=expire_at)


def announcement_unpublish(*, announcement: Announcement) -> Announcement:
    """End a live or scheduled announcement now (it stays, expired, for statistics)."""
    now = timezone.now()
    publish_at = min(announcement.publish_at, now - timedelta(milliseconds=1))
    return announcement_update(announcement=announcement, publish_at=publish_at, expire_at=now)


def _targets_for(*, user: AbstractBaseUser | AnonymousUser, announcement_id: int, now: datetime) -> list[str]:
    """The user's platforms the announcement targets, if it is live to the user."""
    readmodel.user_slot(readmodel.user_id_of(user))  # out-of-range ids fail before anything else
    mine = user_platforms(user=user)
    if not 0 < announcement_id <= MAX_ID:
        raise NotFound("Announcement not found.")
    announcement = (
        Announcement.objects.filter(pk=announcement_id, publish_at__lte=now)
        .exclude(expire_at__lte=now)
        .prefetch_related("platform_rows")
        .first()
    )
    targets = [p for p in (announcement.platforms if announcement else []) if p in mine]
    if not targets:
        raise NotFound("Announcement not found.")
    return targets


def _mark(*, user: AbstractBaseUser | AnonymousUser, announcement_id: int, read: bool, now: datetime | None) -> bool:
    """PostgreSQL first: the rows change and commit, then Redis follows.

    The mark's Redis half is an outbox entry committed with the rows, which
    the request then applies with any older one of the user (in order): a
    process that dies after the commit, or a Redis that refuses, leaves the
    entry for the outbox's replay. The read bits live in keys every reader of
    the platform shares, so no fill of the user would bring them back.
    """
    now = now or timezone.now()
    announcement_id = int(announcement_id)
    targets = _targets_for(user=user, announcement_id=announcement_id, now=now)
    user_id = readmodel.user_id_of(user)
    payload = _payload(announcement_id, targets, read, now)
    with transaction.atomic():
        changed = announcement_reads_set(user_id=user_id, announcement_id=announcement_id, platforms=targets, read=read)
        outbox.enqueue(topic=READ_TOPIC, payload=payload, user_id=user_id)
        transaction.on_commit(lambda: _mark_redis(user_id=user_id))
    return changed


def _mark_redis(*, user_id: int) -> None:
    try:
        outbox.settle_user(user_id=user_id)
    except RedisError:
        logger.warning("redis unavailable; an announcement mark of user %s waits in the outbox", user_id)


def _payload(announcement_id: int, targets: list[str], read: bool, now: datetime) -> dict[str, Any]:
    return {"announcement_id": announcement_id, "platforms": targets, "read": read, "at_ms": readmodel.to_ms(now)}


def replay_mark(payload: dict[str, Any], user_id: int | None) -> None:
    """Outbox handler of ``notices.read``: sets the bits to the given value (idempotent).

    The mark script skips an announcement no longer in the index, so a mark
    replayed after a delete does not bring its bitmap back.
    """
    if user_id is None:
        raise ValueError("a notices.read entry needs a user")
    readmodel.mark(
        platforms=[str(p) for p in payload["platforms"]],
        user_id=int(user_id),
        announcement_id=int(payload["announcement_id"]),
        read=bool(payload["read"]),
    )


def announcement_mark_read(
    *, user: AbstractBaseUser | AnonymousUser, announcement_id: int, now: datetime | None = None
) -> bool:
    """Mark read for ``user`` (in each of the user's platforms it targets); True if it was unread.

    NotFound unless the announcement is live to one of the user's platforms.
    """
    return _mark(user=user, announcement_id=announcement_id, read=True, now=now)


def announcement_mark_unread(
    *, user: AbstractBaseUser | AnonymousUser, announcement_id: int, now: datetime | None = None
) -> bool:
    """Mark unread for ``user`` in every platform of theirs it targets; True if it was read."""
    return _mark(user=user, announcement_id=announcement_id, read=False, now=now)


# The outbox handler of the marks whose Redis half waited (the app's AppConfig names it).
OUTBOX_HANDLERS = {READ_TOPIC: replay_mark}
