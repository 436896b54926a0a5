"""The notifications and the message centre's inbox, kept in step.

A send is one message to all its recipients (``inbox_deliver``); each
recipient's row gets an ``InboxLink`` to it. What the two sides keep equal
is what the message centre's badge counts: an item counts as unread while
it is in the user's list with its read flag clear. So an archived or
snoozed item counts as read here, whatever its own flag, and comes back
unread when it returns to the list unread (unarchived unread, or woken: a
snooze clears the flag). The link holds that answer as both sides last
agreed on it, and from then on either side may change:

- the notification (mark read or unread, delete; through this app or by any
  UPDATE): ``inbox_push`` carries the change to the inbox through the message
  centre's own services. Marking a notification unread brings its item back
  to the list (unarchived, its snooze ended), or the next pull would read the
  item as read and undo the mark. The receivers call it after every commit
  that touched a user's notifications;
- the inbox item (the user marks, archives, snoozes or deletes it, a snooze
  ends, the message is retracted): ``inbox_pull`` carries it back. The inbox
  tells nobody of its changes, and a snooze ends by the clock alone, so the
  pull runs before this app answers anything about a user's notifications
  (``inbox_sync``: the views, the live endpoints and the template tags), and
  the counts the two sides show agree whenever either is read.

Each direction moves the link to what it made both sides say, so a change
carried one way is never carried back. A change that cannot be applied yet
(the message still queued for delivery) stays pending, visible as a link
whose flag differs from its row's, and the next sync tries it again. (With
Redis down the message centre takes marks all the same: it queues them
itself.)
"""

import logging
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.cache import cache
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone
from django.utils.html import escape, linebreaks
from django.utils.translation import gettext

from core.api.errors import LimitExceeded, NotFound, ValidationFailed
from messagecenter.models import InboxHidden, InboxItemState, Message, MessageStatus
from messagecenter.selectors import inbox_list, muted_among
from messagecenter.services import (
    inbox_archive,
    inbox_hide,
    inbox_mark_read,
    inbox_mark_unread,
    inbox_unarchive,
    message_send,
)
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
# Where an item the user took out of the list is (``_parked``).
_ARCHIVED, _SNOOZED = "archived", "snoozed"


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
            muted = _links_create(notifications, message=message, category=category, user_ids=user_ids)
    except (ValidationFailed, LimitExceeded):
        logger.exception("notifications %s..%s stored, but not delivered to the inbox", first.pk, notifications[-1].pk)
        return None
    pending = {
        int(row.recipient_id)
        for row in notifications
        if (not row.unread or row.deleted) and int(row.recipient_id) not in muted
    }
    if pending:
        inbox_push_on_commit(user_ids=pending)
    return message


def _links_create(
    notifications: Sequence[Notification], *, message: Message, category: str, user_ids: Sequence[int]
) -> set[int]:
    """Link each row to the message, but those of recipients who muted the
    category (stored read instead); returns those recipients' ids."""
    muted = muted_among(user_ids=user_ids, category=category, time_ms=int(message.created_at.timestamp() * 1000))
    # Each item arrives unread: a row saved read or deleted is a change to push.
    InboxLink.objects.bulk_create(
        [
            InboxLink(notification=row, user_id=row.recipient_id, message=message, unread=True)
            for row in notifications
            if int(row.recipient_id) not in muted
        ]
    )
    _muted_rows_read([row for row in notifications if int(row.recipient_id) in muted])
    return set(muted)


def _muted_rows_read(rows: Sequence[Notification]) -> None:
    """Rows of recipients who muted the category are stored read. The message
    centre hides what arrives in a muted category for good (unmuting brings
    none of it back), so its badge never counts such an item; an unread row
    would count in ``live_unread_notification_count`` alone, for ever."""
    if not rows:
        return
    Notification.objects.filter(pk__in=[row.pk for row in rows]).update(unread=False)
    for row in rows:
        row.unread = False


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


class _NotYet(Exception):
    """The item cannot take the change in this transaction: the next sync does it."""


def _parked(user_id: int, refs: Collection[str]) -> dict[str, str]:
    """ref -> archived or snoozed, for those of the items the user took
    out of the list, read from the message centre's rows of those actions
    (its truth: Redis follows them), by its rule: archived wins, a snooze
    whose time has passed is over."""
    if not refs:
        return {}
    now = timezone.now()
    parked: dict[str, str] = {}
    rows = InboxItemState.objects.filter(user_id=user_id, item_id__in=sorted(refs))
    for ref, archived, until in rows.values_list("item_id", "archived", "snoozed_until"):
        if archived:
            parked[ref] = _ARCHIVED
        elif until is not None and until > now:
            parked[ref] = _SNOOZED
    return parked


def _unread_in_the_list(*, user: AbstractBaseUser, ref: str, parked: str | None) -> None:
    """Make the item count as unread: marked unread and back in the list. A
    mark alone would leave an archived or snoozed item out of every count,
    and the next pull would read the notification back as read."""
    if parked == _SNOOZED:
        # The message centre has no service that ends a snooze early: archiving
        # a snoozed item ends its snooze (it stays unread, at its own time) and
        # unarchiving puts it back. The unarchive finds the item where Redis
        # says it is, which follows the archive only once that has committed.
        if transaction.get_connection().in_atomic_block:
            raise _NotYet
        inbox_archive(user=user, item_id=ref)
        parked = _ARCHIVED
    # Marked first: an archived item takes marks, and returns with its flag.
    inbox_mark_unread(user=user, item_id=ref)
    if parked == _ARCHIVED:
        inbox_unarchive(user=user, item_id=ref)


@dataclass
class _PushTally:
    """What one push did and left: items changed, a change waiting, links to
    forget, rows whose item the user deleted in the inbox meanwhile."""

    user_id: int
    done: int = 0
    waiting: bool = False  # a change the inbox cannot take yet
    forget: list[int] = field(default_factory=list)  # links with nothing more to keep in step
    deleted_there: list[int] = field(default_factory=list)
    hidden_there: set[int] | None = None

    def hidden(self) -> set[int]:
        """Ids of the messages the user deleted from the inbox, read once per push."""
        if self.hidden_there is None:
            self.hidden_there = _inbox_hidden_message_ids(self.user_id)
        return self.hidden_there


def _push_links(user_id: int) -> tuple[list[Any], list[Any]]:
    """(links whose row changed, links whose row is gone), as dicts of the fields read."""
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
    return changed, orphans


def _push_delete(user: AbstractBaseUser, link: dict[str, Any], tally: _PushTally) -> None:
    try:
        inbox_hide(user=user, item_id=f"m{link['message_id']}")  # archived and snoozed ones too
        tally.done += 1
    except NotFound:
        if link["message__status"] in _ON_ITS_WAY:
            tally.waiting = True  # delete it once it has arrived
            return
    tally.forget.append(link["notification_id"])


def _mark_missed(link: dict[str, Any], *, unread: bool, ref: str, tally: _PushTally) -> bool:
    """The inbox has no item to take the mark: whether the link takes the
    row's flag all the same (the item counts as read there already)."""
    if link["message_id"] in tally.hidden():
        tally.deleted_there.append(link["notification_id"])
        return False
    if link["message__status"] in _ON_ITS_WAY:
        tally.waiting = True
        return False
    if link["message__status"] in _GONE:
        tally.forget.append(link["notification_id"])
        return False
    if unread:
        if _parked(tally.user_id, [ref]):
            tally.waiting = True  # parked since we looked: the next look brings it back
        else:
            # Out of the inbox for good (expired, or pushed out of a full
            # inbox): no item left to count the notification.
            tally.forget.append(link["notification_id"])
        return False
    # Not in the list (snoozed, expired, pushed out): it counts as read there already.
    return True


def _push_mark(user: AbstractBaseUser, link: dict[str, Any], parked: dict[str, str], tally: _PushTally) -> None:
    unread = bool(link["notification__unread"])
    ref = f"m{link['message_id']}"
    try:
        if unread:
            _unread_in_the_list(user=user, ref=ref, parked=parked.get(ref))
        else:
            # An archived item takes the mark (it keeps it for its return);
            # a snoozed one refuses it, and counts as read already.
            inbox_mark_read(user=user, item_id=ref)
        tally.done += 1
    except _NotYet:
        tally.waiting = True
        return
    except NotFound:
        if not _mark_missed(link, unread=unread, ref=ref, tally=tally):
            return
    InboxLink.objects.filter(pk=link["notification_id"]).update(unread=unread)


def _push_close(tally: _PushTally) -> None:
    if tally.deleted_there:
        _delete_rows(tally.deleted_there)
    if tally.forget:
        InboxLink.objects.filter(pk__in=tally.forget).delete()
    if tally.waiting:
        push_scan_soon(tally.user_id)
    if tally.done or tally.deleted_there:
        unread_count_forget([tally.user_id])


def _push(user: AbstractBaseUser) -> int:
    user_id = int(user.pk)
    changed, orphans = _push_links(user_id)
    if not changed and not orphans:
        return 0
    tally = _PushTally(user_id=user_id)
    for link in [*orphans, *(c for c in changed if c["notification__deleted"])]:
        _push_delete(user, link, tally)
    marks = [c for c in changed if not c["notification__deleted"]]
    parked = _parked(user_id, {f"m{c['message_id']}" for c in marks if c["notification__unread"]})
    for link in marks:
        _push_mark(user, link, parked, tally)
    _push_close(tally)
    return tally.done


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


def _inbox_unread_message_ids(user: AbstractBaseUser, categories: Collection[str]) -> set[int]:
    """Ids of the messages that count as unread in the user's inbox (listed,
    read flag clear: what the badge counts), in these categories."""
    found: set[int] = set()
    for category in sorted(categories):
        cursor: str | None = None
        while True:
            page = inbox_list(user=user, category=category, unread_only=True, limit=_PAGE, cursor=cursor)
            found.update(int(item.id[1:]) for item in page.results if item.id.startswith("m") and item.id[1:].isdigit())
            cursor = page.next_cursor
            if not cursor:
                break
    return found


def _inbox_hidden_message_ids(user_id: int) -> set[int]:
    """Ids of the messages the user deleted from the inbox (the message
    centre's rows of those deletes, its truth: written before Redis hears)."""
    refs = InboxHidden.objects.filter(user_id=user_id, item_id__startswith="m").values_list("item_id", flat=True)
    return {int(ref[1:]) for ref in refs if ref[1:].isdigit()}


def inbox_pull(*, user: AbstractBaseUser) -> int:
    """Carry what became of the user's items in the inbox to their
    notifications: deletes, then items that came to count as unread, then
    items that stopped (read, archived, snoozed, retracted). Returns how many
    rows changed.

    Three queries and one inbox page per hundred unread items: the links
    worth a look are the unread ones and those of items unread or deleted in
    the inbox, never the user's whole history. The unread items are listed
    in the category sends go to and in any other that an unread link's
    message has (sent before NOTIFICATIONS_INBOX_CATEGORY changed)."""
    if not enabled():
        return 0
    user_id = int(user.pk)
    hidden_there = _inbox_hidden_message_ids(user_id)
    fields = ("notification_id", "message_id", "unread", "message__status")
    links = InboxLink.objects.filter(user_id=user_id)
    counted = list(links.filter(unread=True).values_list(*fields, "message__category"))
    unread_there = _inbox_unread_message_ids(user, {inbox_category(), *(row[4] for row in counted)})
    wanted = sorted(unread_there | hidden_there)
    rest = list(links.filter(unread=False, message_id__in=wanted).values_list(*fields)) if wanted else []
    verdict = _pull_verdict([*counted, *rest], hidden_there=hidden_there, unread_there=unread_there)
    hidden, gone, reopened, closed = verdict.hidden, verdict.gone, verdict.reopened, verdict.closed
    if hidden:
        _delete_rows(hidden)
    changed = _flags_set(reopened, unread=True) + _flags_set(closed, unread=False)
    if gone:
        InboxLink.objects.filter(pk__in=gone).delete()
    if changed or hidden:
        unread_count_forget([user_id])
    return changed + len(hidden)


@dataclass
class _PullVerdict:
    """Links by what the inbox made of their item."""

    hidden: list[int] = field(default_factory=list)
    gone: list[int] = field(default_factory=list)  # retracted, expired, cancelled: the item left every inbox
    reopened: list[int] = field(default_factory=list)
    closed: list[int] = field(default_factory=list)


def _pull_verdict(rows: Iterable[Sequence[Any]], *, hidden_there: set[int], unread_there: set[int]) -> _PullVerdict:
    verdict = _PullVerdict()
    for pk, message_id, agreed, status, *_category in rows:
        if message_id in hidden_there:
            verdict.hidden.append(pk)
        elif status in _GONE:
            verdict.gone.append(pk)
            if agreed:
                verdict.closed.append(pk)  # the badge lost it: the row is read, and stays
        elif message_id in unread_there:
            if not agreed:
                verdict.reopened.append(pk)
        elif agreed and status == MessageStatus.DELIVERED:
            # Read, archived, snoozed, or out of the inbox: no longer counted.
            # (A message still on its way is counted nowhere yet.)
            verdict.closed.append(pk)
    return verdict


def _flags_set(notification_ids: Sequence[int], *, unread: bool) -> int:
    """Set rows and links to what the inbox says; returns rows changed. A row
    that holds that flag already (the user made the same change here) only
    needs its link to agree; no signal is sent, so nothing is pushed back."""
    if not notification_ids:
        return 0
    with transaction.atomic():
        changed = Notification.objects.filter(pk__in=notification_ids, unread=not unread).update(unread=unread)
        InboxLink.objects.filter(pk__in=notification_ids).update(unread=unread)
    return changed


def inbox_sync(*, user: Any) -> int:
    """Push this user's waiting changes (``_push_scan_due``), then pull the
    inbox's: called before anything about the user's notifications is
    answered. Returns rows and items changed (0 for an anonymous user or with
    delivery off)."""
    if not enabled() or user is None or not getattr(user, "is_authenticated", False):
        return 0
    pushed = _push(user) if _push_scan_due(int(user.pk)) else 0
    return pushed + inbox_pull(user=user)
