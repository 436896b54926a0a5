"""The notifications and the message centre's inbox, kept in step.

A send is one message to all its recipients (``inbox_deliver``); each
recipient's row gets an ``InboxLink`` to it, holding the read flag both sides
last agreed on. From then on either side may change:

- the notification (mark read or unread, delete; through this app or by any
  UPDATE): ``inbox_push`` carries the change to the inbox through the message
  centre's own mark and delete services. The receivers call it after every
  commit that touched a user's notifications;
- the inbox item (the user marks or deletes it in the message centre):
  ``inbox_pull`` carries it back. The inbox's services tell nobody of their
  marks, so the pull runs before this app answers anything about a user's
  notifications (``inbox_sync``: the views, the live endpoints and the
  template tags), and the counts the two sides show agree whenever either
  is read.

A change that cannot be applied yet (the message still queued for delivery,
a snoozed item) stays pending, visible as a link whose flag differs, and the
next sync tries it again. (With Redis down the message centre takes marks all
the same: it queues them itself.)
"""

import logging
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.cache import cache
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils.html import escape, linebreaks
from django.utils.translation import gettext

from core.exceptions import LimitExceeded, NotFound, ValidationFailed
from messagecenter.models import InboxHidden, Message, MessageStatus
from messagecenter.selectors import inbox_item_get, inbox_list, muted_among
from messagecenter.services import inbox_hide, inbox_mark_read, inbox_mark_unread, message_send
from notifications.models import InboxLink, Notification
from notifications.settings import soft_delete

logger = logging.getLogger(__name__)

# The message is not in the inboxes yet: a change waits for it.
_ON_ITS_WAY = (MessageStatus.SCHEDULED, MessageStatus.QUEUED, MessageStatus.DELIVERING)
# The message left every inbox (or never reached one): nothing to keep in step.
_GONE = (MessageStatus.RETRACTED, MessageStatus.EXPIRED, MessageStatus.CANCELLED)
_TITLE_LENGTH = 200
_SUMMARY_LENGTH = 300
_LINK_LENGTH = 500
# Unread items read per inbox page while pulling (the selector's ceiling).
_PAGE = 100


def enabled() -> bool:
    return bool(getattr(settings, "NOTIFICATIONS_INBOX_ENABLED", True))


def inbox_category() -> str:
    return str(getattr(settings, "NOTIFICATIONS_INBOX_CATEGORY", "interaction"))


def unread_count_key(user_id: int) -> str:
    """The cache key of a user's unread count (the template tags keep it for
    CACHE_TIMEOUT seconds; every change of the user's notifications drops it)."""
    return f"notifications:unread:{int(user_id)}"


def unread_count_forget(user_ids: Iterable[int]) -> None:
    cache.delete_many([unread_count_key(u) for u in set(user_ids)])


def rescan_seconds() -> float:
    return float(getattr(settings, "NOTIFICATIONS_INBOX_RESCAN_SECONDS", 30.0))


def _push_scan_key(user_id: int) -> str:
    return f"notifications:push-scanned:{int(user_id)}"


def _push_scan_due(user_id: int) -> bool:
    """Whether a sync should look for changes to push: at most once per
    NOTIFICATIONS_INBOX_RESCAN_SECONDS per user, sooner when a push had to wait.

    Every change made through this app is pushed after its commit anyway; the
    look finds what those pushes could not do yet and rows some code rewrote
    with a plain UPDATE. It costs two scans of the user's links: not for every poll."""
    return bool(cache.add(_push_scan_key(user_id), 1, timeout=rescan_seconds()))


def push_scan_soon(user_id: int) -> None:
    """A change waits (its message not delivered yet, its item snoozed): the next sync looks again."""
    cache.delete(_push_scan_key(user_id))


# --- A send becomes one message ----------------------------------------------------------


def _headline(*, actor: Any, verb: str, action_object: Any, target: Any) -> str:
    """What the notifications' ``__str__`` says, without the "... ago". An
    object that is gone (an imported row's deleted actor) is left out."""
    parts = {"actor": actor or "", "verb": verb, "action_object": action_object, "target": target}
    if target is not None and action_object is not None:
        text = gettext("%(actor)s %(verb)s %(action_object)s on %(target)s") % parts
    elif target is not None:
        text = gettext("%(actor)s %(verb)s %(target)s") % parts
    elif action_object is not None:
        text = gettext("%(actor)s %(verb)s %(action_object)s") % parts
    else:
        text = gettext("%(actor)s %(verb)s") % parts
    return " ".join(text.split())


def _link(data: Any) -> str:
    """``data["url"]`` when it is a link the inbox may show: http(s), or a path of this site."""
    url = data.get("url") if isinstance(data, dict) else None
    if not isinstance(url, str) or len(url) > _LINK_LENGTH:
        return ""
    if url.startswith(("https://", "http://")) or (url.startswith("/") and not url.startswith("//")):
        return url
    return ""


def inbox_deliver(
    *, notifications: Sequence[Notification], actor: Any, action_object: Any = None, target: Any = None
) -> Message | None:
    """Deliver one send's rows as ONE message to their recipients' inboxes
    (category ``NOTIFICATIONS_INBOX_CATEGORY``), linking each row to it.

    Runs in the send's transaction; the message centre delivers after commit.
    Recipients who muted the category get no link: the message centre skips
    them too. A recipient set the message centre refuses (a user id beyond
    its bitmaps) leaves the notifications stored, out of the inbox, and is
    logged. Returns the message (None when delivery is off or refused).
    """
    if not enabled() or not notifications:
        return None
    first = notifications[0]
    user_ids = sorted({int(row.recipient_id) for row in notifications})
    category = inbox_category()
    title = _headline(actor=actor, verb=first.verb, action_object=action_object, target=target)
    description = first.description or ""
    try:
        # A savepoint: a refusal undoes the message, not the notifications.
        with transaction.atomic():
            message = message_send(
                sender=actor if isinstance(actor, AbstractBaseUser) else None,
                category=category,
                title=title[:_TITLE_LENGTH],
                summary=description[:_SUMMARY_LENGTH],
                body_html=linebreaks(escape(description)) if description else "",
                link=_link(first.data),
                user_ids=user_ids,
            )
            muted = muted_among(
                user_ids=user_ids, category=category, time_ms=int(message.created_at.timestamp() * 1000)
            )
            # Each item arrives unread: a row saved read or deleted is a change to push.
            InboxLink.objects.bulk_create(
                [
                    InboxLink(notification=row, user_id=row.recipient_id, message=message, unread=True)
                    for row in notifications
                    if int(row.recipient_id) not in muted
                ]
            )
    except (ValidationFailed, LimitExceeded):
        logger.exception("notifications %s..%s stored, but not delivered to the inbox", first.pk, notifications[-1].pk)
        return None
    pending = {int(row.recipient_id) for row in notifications if not row.unread or row.deleted}
    if pending:
        inbox_push_on_commit(user_ids=pending)
    return message


# --- Notifications -> inbox ---------------------------------------------------------------


def inbox_push_on_commit(*, user_ids: Collection[int]) -> None:
    """After the current transaction commits, push these users' changes (now,
    outside one). Robust: the rows are committed whatever happens to the push;
    what it left undone, a later sync's look finds (``_push_scan_due``)."""
    ids = sorted(set(user_ids))
    if not ids or not enabled():
        return
    transaction.on_commit(lambda: _push_committed(ids), robust=True)


def _push_committed(user_ids: list[int]) -> None:
    unread_count_forget(user_ids)
    inbox_push(user_ids=user_ids)


def inbox_push(*, user_ids: Iterable[int]) -> int:
    """Carry each user's changed notifications to their inbox items; returns
    how many items changed."""
    if not enabled():
        return 0
    users = get_user_model().objects.filter(pk__in=set(user_ids))
    return sum(_push(user) for user in users)


def _push(user: AbstractBaseUser) -> int:
    user_id = int(user.pk)
    links = InboxLink.objects.filter(user_id=user_id)
    changed = list(
        links.filter(
            Q(notification__deleted=True)
            | Q(notification__unread=True, unread=False)
            | Q(notification__unread=False, unread=True)
        ).values("notification_id", "message_id", "message__status", "notification__unread", "notification__deleted")
    )
    # Rows deleted outright: their links stay behind until the inbox item is deleted too.
    orphans = list(
        links.filter(~Exists(Notification.objects.filter(pk=OuterRef("notification_id")))).values(
            "notification_id", "message_id", "message__status"
        )
    )
    if not changed and not orphans:
        return 0
    done = 0
    waiting = False  # a change the inbox cannot take yet
    forget: list[int] = []  # links with nothing more to keep in step
    for link in [*orphans, *(c for c in changed if c["notification__deleted"])]:
        try:
            inbox_hide(user=user, item_id=f"m{link['message_id']}")
            done += 1
        except NotFound:
            if link["message__status"] in _ON_ITS_WAY:
                waiting = True  # delete it once it has arrived
                continue
        forget.append(link["notification_id"])
    hidden_there: set[int] | None = None
    deleted_there: list[int] = []  # rows whose item the user deleted in the inbox meanwhile
    for link in changed:
        if link["notification__deleted"]:
            continue
        unread = bool(link["notification__unread"])
        mark = inbox_mark_unread if unread else inbox_mark_read
        try:
            mark(user=user, item_id=f"m{link['message_id']}")
        except NotFound:
            if hidden_there is None:
                hidden_there = _inbox_hidden_message_ids(user_id)
            if link["message_id"] in hidden_there:
                deleted_there.append(link["notification_id"])
            elif link["message__status"] in _GONE:
                forget.append(link["notification_id"])
            else:
                waiting = True  # on its way, or snoozed (no mark reaches a snoozed item)
            continue
        InboxLink.objects.filter(pk=link["notification_id"]).update(unread=unread)
        done += 1
    if deleted_there:
        _delete_rows(deleted_there)
    if forget:
        InboxLink.objects.filter(pk__in=forget).delete()
    if waiting:
        push_scan_soon(user_id)
    if done or deleted_there:
        unread_count_forget([user_id])
    return done


def _delete_rows(notification_ids: Sequence[int]) -> None:
    """The user deleted these items in the inbox: delete the rows as the app's
    own delete would (flag or remove them), and their links with them."""
    with transaction.atomic():
        if soft_delete():
            Notification.objects.filter(pk__in=notification_ids).update(deleted=True)
        else:
            Notification.objects.filter(pk__in=notification_ids).delete()
        InboxLink.objects.filter(pk__in=notification_ids).delete()


# --- Inbox -> notifications ---------------------------------------------------------------


def _inbox_unread_message_ids(user: AbstractBaseUser) -> set[int]:
    """Ids of the messages unread in the user's inbox list, in the category the
    sends go to (archived and snoozed items are not in the list)."""
    found: set[int] = set()
    cursor: str | None = None
    while True:
        page = inbox_list(user=user, category=inbox_category(), unread_only=True, limit=_PAGE, cursor=cursor)
        found.update(int(item.id[1:]) for item in page.results if item.id.startswith("m") and item.id[1:].isdigit())
        cursor = page.next_cursor
        if not cursor:
            return found


def _inbox_hidden_message_ids(user_id: int) -> set[int]:
    """Ids of the messages the user deleted from the inbox (the message
    centre's rows of those deletes, its truth: written before Redis hears)."""
    refs = InboxHidden.objects.filter(user_id=user_id, item_id__startswith="m").values_list("item_id", flat=True)
    return {int(ref[1:]) for ref in refs if ref[1:].isdigit()}


def inbox_pull(*, user: AbstractBaseUser) -> int:
    """Carry what the user did in the inbox to their notifications: deletes,
    then unread marks, then read marks. Returns how many rows changed.

    Two queries and one inbox page per hundred unread items: the links worth
    a look are the unread ones and those of items unread or deleted in the
    inbox, never the user's whole history."""
    if not enabled():
        return 0
    user_id = int(user.pk)
    hidden_there = _inbox_hidden_message_ids(user_id)
    unread_there = _inbox_unread_message_ids(user)
    links = list(
        InboxLink.objects.filter(user_id=user_id)
        .filter(Q(unread=True) | Q(message_id__in=sorted(unread_there | hidden_there)))
        .values_list("notification_id", "message_id", "unread", "message__status")
    )
    hidden = [pk for pk, message_id, _unread, _status in links if message_id in hidden_there]
    # Retracted or expired: the item left every inbox; the row stays as it is.
    gone = [pk for pk, message_id, unread, status in links if status in _GONE and message_id not in hidden_there]
    reopened = [
        pk for pk, message_id, unread, _status in links if not unread and message_id in unread_there - hidden_there
    ]
    accounted = unread_there | hidden_there
    read = []
    for pk, message_id, unread, status in links:
        if not unread or status != MessageStatus.DELIVERED or message_id in accounted:
            continue
        try:
            item = inbox_item_get(user=user, item_id=f"m{message_id}")
        except NotFound:
            continue  # snoozed, or pushed out of a full inbox: nothing the user said
        if item.read:
            read.append(pk)
    if hidden:
        _delete_rows(hidden)
    if gone:
        InboxLink.objects.filter(pk__in=gone).delete()
    changed = _flags_set(reopened, unread=True) + _flags_set(read, unread=False)
    if changed or hidden:
        unread_count_forget([user_id])
    return changed + len(hidden)


def _flags_set(notification_ids: Sequence[int], *, unread: bool) -> int:
    """Set rows and links to what the inbox says. Only rows still holding the
    other flag change: a row the user changed here meanwhile keeps its change,
    and its link (left as it was) makes it the next push's."""
    if not notification_ids:
        return 0
    with transaction.atomic():
        rows = list(
            Notification.objects.filter(pk__in=notification_ids, unread=not unread).values_list("pk", flat=True)
        )
        Notification.objects.filter(pk__in=rows).update(unread=unread)
        InboxLink.objects.filter(pk__in=rows).update(unread=unread)
    return len(rows)


def inbox_sync(*, user: Any) -> int:
    """Push this user's waiting changes (``_push_scan_due``), then pull the
    inbox's: called before anything about the user's notifications is
    answered. Returns rows and items changed (0 for an anonymous user or with
    delivery off)."""
    if not enabled() or user is None or not getattr(user, "is_authenticated", False):
        return 0
    pushed = _push(user) if _push_scan_due(int(user.pk)) else 0
    return pushed + inbox_pull(user=user)
