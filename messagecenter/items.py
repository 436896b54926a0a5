"""How messages and bulletins look in the read model: conversions, and one
read (``details_of_messages``) of what many messages' details need at once."""

from collections.abc import Iterable, Sequence
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from core.html import summarize
from messagecenter.models import Bulletin, Message, MessageImage, Notification
from messagecenter.readmodel import InboxEntry, to_ms

KIND_BY_PREFIX = {"m": "message", "b": "bulletin", "n": "notification"}


def sender_name(user: AbstractBaseUser | None) -> str | None:
    """The name an item shows as its sender: the operator's full name, else the
    username; None when nobody sent it (the system: clients show their own word).

    The name is copied into the item's detail when the detail is written, so
    renaming an operator does not rewrite the items already delivered: they keep
    the old name until a drift repair or a rebuild writes their details again
    (the PostgreSQL fallback, reading the user row, shows the new one meanwhile).
    Callers load the user with the item (``select_related``) to spare a query each.
    """
    if user is None:
        return None
    get_full_name = getattr(user, "get_full_name", None)
    full = str(get_full_name() or "").strip() if callable(get_full_name) else ""
    return full or str(user.get_username())


def _group_fields(group_key: str, actor: str) -> dict[str, str]:
    # Only grouped items carry the fields: details of every other item stay as they were.
    return {"group_key": group_key, "actor": actor} if group_key else {}


# What an inbox entry is made of, in the order ``entry_of_row`` takes it: a
# fill reads these with its scan of the audiences, never whole rows.
ENTRY_FIELDS = ("id", "category", "slot_month", "slot_offset", "created_at", "expire_at", "group_key", "actor")


def entry_of_row(prefix: str, row: Sequence[Any]) -> InboxEntry:
    """The entry of an item (ref ``<prefix><id>``) from its ``ENTRY_FIELDS`` values."""
    pk, category, month, offset, created_at, expire_at, group_key, actor = row
    return InboxEntry(
        ref=f"{prefix}{pk}",
        category=category,
        month=month,
        offset=offset,
        score=to_ms(created_at),
        expire_ms=to_ms(expire_at) if expire_at else 0,
        group_key=group_key,
        actor=actor,
    )


def message_entry(message: Message) -> InboxEntry:
    m = message
    return entry_of_row(
        "m", (m.pk, m.category, m.slot_month, m.slot_offset, m.created_at, m.expire_at, m.group_key, m.actor)
    )


def message_images(message: Message, image_files: Sequence[MessageImage] | None = None) -> list[str]:
    """Linked images, then uploaded ones (``image_files`` when the caller holds them)."""
    urls = [str(u) for u in (message.images or [])]
    files = message.image_files.all() if image_files is None else image_files
    urls.extend(image.file.url for image in files)
    return urls


def message_detail(message: Message, image_files: Sequence[MessageImage] | None = None) -> dict[str, Any]:
    return {
        "id": message.ref,
        "kind": "message",
        "category": message.category,
        "title": message.title,
        "summary": message.summary,
        "body_html": message.body_html,
        "images": message_images(message, image_files),
        "link": message.link or None,
        "member": message_entry(message).member,
        "sender": sender_name(message.sender) if message.sender_id is not None else None,
        **_extras(actions=message.actions, translations=message.translations),
        **_group_fields(message.group_key, message.actor),
    }


def details_of_messages(messages: Sequence[Message]) -> dict[str, dict[str, Any]]:
    """ref -> detail of these messages (loaded with ``select_related("sender")``),
    their image files read in one query for all (a tenth less time than a
    ``prefetch_related`` on a page of ten): the PostgreSQL page, the rebuild,
    the drift check and a refresh of details share it."""
    images: dict[int, list[MessageImage]] = {}
    if messages:
        for image in MessageImage.objects.filter(message_id__in=[m.pk for m in messages]):
            images.setdefault(image.message_id, []).append(image)
    return {m.ref: message_detail(m, images.get(m.pk, [])) for m in messages}


def details_of_refs(refs: Iterable[str]) -> dict[str, dict[str, Any]]:
    """ref -> what the inbox shows of these items (refs of messages, bulletins
    and notifications), one query per kind present (plus message images): the
    inbox served from PostgreSQL, and a fill bringing back the details Redis lacks."""
    ids: dict[str, list[int]] = {"m": [], "b": [], "n": []}
    for ref in refs:
        ids[ref[0]].append(int(ref[1:]))
    details: dict[str, dict[str, Any]] = {}
    if ids["m"]:
        messages = Message.objects.filter(pk__in=ids["m"]).defer("audience_bitmap", "users_bitmap")
        details.update(details_of_messages(list(messages.select_related("sender"))))
    if ids["b"]:
        for bulletin in Bulletin.objects.filter(pk__in=ids["b"]).select_related("created_by"):
            details[bulletin.ref] = bulletin_detail(bulletin)
    if ids["n"]:
        for notification in Notification.objects.filter(pk__in=ids["n"]).defer("audience_bitmap"):
            details[notification.ref] = notification_detail(notification)
    return details


def _extras(*, actions: Sequence[Any] = (), translations: dict[str, Any] | None = None) -> dict[str, Any]:
    """Actions and translations, named only when an item has them: most
    details stay as small as before, and a reader reads them as empty."""
    extras: dict[str, Any] = {}
    if actions:
        extras["actions"] = [{"id": str(a["id"]), "label": str(a["label"])} for a in actions]
    if translations:
        extras["translations"] = translations
    return extras


def bulletin_entry(bulletin: Bulletin) -> InboxEntry:
    return InboxEntry(
        ref=bulletin.ref,
        category="system",
        month=bulletin.slot_month,
        offset=bulletin.slot_offset,
        score=to_ms(bulletin.display_time),
        expire_ms=to_ms(bulletin.expire_at) if bulletin.expire_at else 0,
    )


def bulletin_detail(bulletin: Bulletin) -> dict[str, Any]:
    return {
        "id": bulletin.ref,
        "kind": "bulletin",
        "category": "system",
        "title": bulletin.title,
        "summary": summarize(bulletin.body_html),
        "body_html": bulletin.body_html,
        "images": [],
        "link": None,
        "member": bulletin_entry(bulletin).member,
        "sender": sender_name(bulletin.created_by) if bulletin.created_by_id is not None else None,
        **_extras(translations=bulletin.translations),
    }


def notification_entry(notification: Notification) -> InboxEntry:
    n = notification
    return entry_of_row(
        "n", (n.pk, n.category, n.slot_month, n.slot_offset, n.created_at, n.expire_at, n.group_key, n.actor)
    )


def notification_detail(notification: Notification) -> dict[str, Any]:
    return {
        "id": notification.ref,
        "kind": "notification",
        "category": notification.category,
        "title": notification.title,
        "summary": summarize(notification.body_html),
        "body_html": notification.body_html,
        "images": [],
        "link": None,
        "member": notification_entry(notification).member,
        "scope": notification.scope,
        # Notifications come from rules and subscriptions, never from a person.
        "sender": None,
        **_extras(translations=notification.translations),
        **_group_fields(notification.group_key, notification.actor),
    }
