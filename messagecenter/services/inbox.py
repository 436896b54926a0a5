"""The signed-in user's inbox (writes), and the delivery entry points every
item source (messages, bulletins, later subscription notifications) uses."""

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone
from pyroaring import BitMap

from core.exceptions import NotFound, ValidationFailed
from messagecenter.exceptions import read_model_required
from messagecenter.models import CATEGORIES, InboxHidden
from messagecenter.readmodel import InboxEntry, inbox, publish, to_ms

MAX_ITEM_ID_LENGTH = 40


def _now_ms(now: datetime | None) -> int:
    return to_ms(now or timezone.now())


def _ref(item_id: str) -> str:
    # Opaque ids: anything malformed is simply not in the inbox.
    if not item_id or len(item_id) > MAX_ITEM_ID_LENGTH or "|" in item_id:
        raise NotFound("No such item in your inbox.")
    return item_id


def inbox_deliver(
    *, entry: InboxEntry, user_ids: Iterable[int], detail: Mapping[str, Any] | None = None, now: datetime | None = None
) -> int:
    """Push one item into these users' inboxes (write fan-out).

    The entry point for any item source: give the item's ``InboxEntry``
    (ref ``<kind letter><id>``, category, bitmap slot from ``slot_allocate``,
    score, expiry) and, once, its ``detail`` (title, summary, body_html,
    images, link). Idempotent; hidden refs stay hidden. Returns how many
    inboxes gained the item.
    """
    if detail is not None:
        publish.item_detail_put(ref=entry.ref, detail=detail)
    return publish.inbox_deliver(entry=entry, user_ids=user_ids, now_ms=_now_ms(now))


def inbox_publish_pull(*, entry: InboxEntry, detail: Mapping[str, Any], audience: BitMap | None) -> int:
    """Store an item once for users to merge on read (pull fan-out).

    ``audience`` None means everyone (including users created later);
    otherwise the send-time set of user ids. Returns the pull sequence
    number (0 when it was registered already).
    """
    return publish.pull_register(entry=entry, detail=detail, audience=audience)


@read_model_required
def inbox_mark_read(*, user: AbstractBaseUser, item_id: str, now: datetime | None = None) -> bool:
    """Mark read; raises NotFound unless the item is live in this user's inbox."""
    if not inbox.inbox_set_read(user_id=int(user.pk), ref=_ref(item_id), read=True, now_ms=_now_ms(now)):
        raise NotFound("No such item in your inbox.")
    return True


@read_model_required
def inbox_mark_unread(*, user: AbstractBaseUser, item_id: str, now: datetime | None = None) -> bool:
    if not inbox.inbox_set_read(user_id=int(user.pk), ref=_ref(item_id), read=False, now_ms=_now_ms(now)):
        raise NotFound("No such item in your inbox.")
    return True


@read_model_required
def inbox_mark_all_read(*, user: AbstractBaseUser, category: str | None = None, now: datetime | None = None) -> int:
    """One Lua call marks every live unread item (of the category) read; returns how many."""
    if category is not None and category not in CATEGORIES:
        raise ValidationFailed(
            f"Unknown category {category!r}.",
            code="invalid_category",
            fields={"category": [f"Choose from {', '.join(CATEGORIES)}."]},
        )
    return inbox.inbox_read_all(user_id=int(user.pk), category=category, now_ms=_now_ms(now))


@read_model_required
def inbox_mark_seen(*, user: AbstractBaseUser, now: datetime | None = None) -> None:
    """Move the unseen watermark: unseen_count is 0 until something newer arrives."""
    inbox.inbox_seen(user_id=int(user.pk), now_ms=_now_ms(now))


@read_model_required
def inbox_hide(*, user: AbstractBaseUser, item_id: str, now: datetime | None = None) -> bool:
    """Delete an item from this user's inbox only.

    PostgreSQL keeps a row per hide (a user's own action, so cheap) so a
    rebuild of Redis keeps it hidden; Redis follows after commit.
    """
    ref = _ref(item_id)
    now_ms = _now_ms(now)
    user_id = int(user.pk)
    if inbox.inbox_get(user_id=user_id, ref=ref, now_ms=now_ms) is None:
        raise NotFound("No such item in your inbox.")
    with transaction.atomic():
        InboxHidden.objects.get_or_create(user_id=user_id, item_id=ref)
        transaction.on_commit(lambda: inbox.inbox_hide(user_id=user_id, ref=ref, now_ms=now_ms))
    return True


REMOVED_KEEP_DEFAULT = 100_000


def inbox_removed_trim(*, keep: int | None = None) -> int:
    """Bound the global removal list (a periodic task); returns entries dropped.

    Users who had not settled past the dropped entries re-check their whole
    inbox against the item details on their next read, so nothing is missed.
    """
    from django.conf import settings

    if keep is None:
        keep = int(getattr(settings, "MESSAGECENTER_REMOVED_KEEP", REMOVED_KEEP_DEFAULT))
    return publish.removed_trim(keep=keep)
