"""Grouped items: what a create may say about its group, and the user's
actions that end a group (mark read, archive, snooze, delete act on the whole group).

A message or notification with a ``group_key`` collapses, in each
recipient's inbox, into the row of that key's open group: the newest item
is the row, the older ones leave the list (their removal is the fan-out's
eviction, settled by the recipient's next read), and the row carries the
group's count and its last three distinct actors. A group is open while its
row is unread and listed; reading, archiving, snoozing or deleting the row
ends it, and the next item of the key starts a new one. Delivery does this in
``deliver.lua`` (``_group.lua``): a few commands per recipient whatever the
group's size. The read model's ``grouping`` module owns the keys.
"""

import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.utils import timezone
from pyroaring import BitMap
from redis.exceptions import RedisError

from core.api.errors import ValidationFailed
from messagecenter import fallback
from messagecenter.fill import inbox_forget, inbox_forget_holding, part_stale
from messagecenter.models import InboxGroupEnd, InboxHidden
from messagecenter.readmodel import grouping, publish

logger = logging.getLogger(__name__)

GROUP_FIELD_MAX = 100


def group_item_removed(*, group_key: str, audience: BitMap, member: str = "") -> None:
    """A grouped item leaves its recipients' inboxes (retracted, withdrawn,
    expired): once the removal commits, their cached parts are dropped, so each
    one's group re-forms from the items left (the newest left is the row, with
    the count and actors of what is left) on their next read, as PostgreSQL
    computes it. An item for everyone has no send-time audience: the users
    Redis holds it for are found by its ``member`` among their items of the key."""
    if not group_key:
        return
    if audience:
        user_ids = list(audience)
        transaction.on_commit(lambda: _forget(lambda: inbox_forget(user_ids=user_ids)))
    elif member:
        transaction.on_commit(lambda: _forget(lambda: inbox_forget_holding(group_key=group_key, member=member)))


def _forget(forget: Callable[[], int]) -> None:
    try:
        forget()
    except RedisError:
        # Redis down: nothing of it is read until it answers again, and then
        # what it held is checked against PostgreSQL (healing).
        logger.warning("redis unavailable; a removed item's group not re-formed")


def group_fields_clean(*, group_key: Any = "", actor: Any = "") -> tuple[str, str]:
    """The create's ``group_key`` and ``actor``, checked (text of at most 100
    characters; blank: not grouped / no actor)."""
    cleaned: list[str] = []
    for name, value in (("group_key", group_key), ("actor", actor)):
        if value is None:
            value = ""
        if not isinstance(value, str):
            raise ValidationFailed(f"{name} must be a string.", fields={name: ["Not a valid string."]})
        if len(value) > GROUP_FIELD_MAX:
            raise ValidationFailed(
                f"{name} is longer than {GROUP_FIELD_MAX} characters.",
                fields={name: [f"At most {GROUP_FIELD_MAX} characters."]},
            )
        cleaned.append(value.strip())
    return cleaned[0], cleaned[1]


# --- The row acts for its group ------------------------------------------------------
#
# Called after the row's own action went through (read, archived, snoozed,
# deleted): the older items of the group left the list when the newer ones
# came, so what is left is to end the group (the next item of its key starts
# a new one) and, for a delete, to delete the older items too. Redis decides
# while it answers (group_close.lua); when it is down PostgreSQL decides the
# same way (``fallback``'s groups), the end is committed all the same, and
# the user's part in Redis is recorded stale, to be dropped once it is back.


def _ended(user_id: int, ends: list[tuple[str, int, str]]) -> None:
    # PostgreSQL keeps each end (key, time, row): the groups are derivable
    # from it (a rebuild replays them before the items; the fallback cuts the
    # items with them).
    InboxGroupEnd.objects.bulk_create(
        [InboxGroupEnd(user_id=user_id, group_key=key, until_ms=until, row_ref=ref) for key, until, ref in ends],
        ignore_conflicts=True,
    )


def _ended_without_redis(user_id: int, ref: str, *, delete: bool) -> None:
    """Redis is down: end the row's group (and for a delete, delete its older
    items) as PostgreSQL has it; the user's part in Redis is stale from here."""
    logger.warning("redis unavailable; group of %s ended from PostgreSQL for user %s", ref, user_id)
    # A deleted row is hidden already: its group is read as it was before.
    found = fallback.group_of_row(user_id=user_id, ref=ref, now=timezone.now(), deleted=delete)
    if found is None:
        return
    group_key, until, refs, ended = found
    if not ended:
        _ended(user_id, [(group_key, until, ref)])
    older = [r for r in refs if r != ref] if delete else []
    if older:
        InboxHidden.objects.bulk_create([InboxHidden(user_id=user_id, item_id=r) for r in older], ignore_conflicts=True)
    part_stale(user_id)


def group_row_read(*, user_id: int, ref: str) -> None:
    """The row was marked read (or archived, or snoozed): its group ends."""
    try:
        ended = grouping.group_close(user_id=user_id, ref=ref)
    except RedisError:
        _ended_without_redis(user_id, ref, delete=False)
        return
    if ended is not None:
        _ended(user_id, [(*ended, ref)])


def groups_all_read(*, user_id: int, category: str | None) -> None:
    """ "Read all" read every row: every open group (of the category) ends."""
    try:
        ended = grouping.groups_close_all(user_id=user_id, category=category)
    except RedisError:
        logger.warning("redis unavailable; groups of user %s ended from PostgreSQL", user_id)
        ended = fallback.groups_open(user_id=user_id, category=category, now=timezone.now())
        if ended:
            part_stale(user_id)
    _ended(user_id, ended)


def group_row_deleted(*, user_id: int, ref: str) -> None:
    """The row was deleted: its group ends, and the group's older items are
    deleted too (a row each in PostgreSQL, as for any delete, so a rebuild
    keeps them out)."""
    try:
        ended = grouping.group_close(user_id=user_id, ref=ref)
        refs = [r for r in grouping.group_forget(user_id=user_id, ref=ref) if r != ref]
    except RedisError:
        _ended_without_redis(user_id, ref, delete=True)
        return
    if ended is not None:
        _ended(user_id, [(*ended, ref)])
    if not refs:
        return
    InboxHidden.objects.bulk_create([InboxHidden(user_id=user_id, item_id=r) for r in refs], ignore_conflicts=True)
    publish.user_hidden_add(user_id=user_id, refs=refs)


def group_rows_acted(*, user_id: int, refs: list[str], action: str) -> None:
    """A bulk action on rows: read and archive end their groups, delete
    deletes them (a row without a group changes nothing here)."""
    for ref in refs:
        if action == "delete":
            group_row_deleted(user_id=user_id, ref=ref)
        elif action in ("read", "archive"):
            group_row_read(user_id=user_id, ref=ref)
