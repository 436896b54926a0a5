"""Grouped items: what a create may say about its group, and the user's
actions that end a group (mark read, archive, delete act on the whole group).

A message or notification with a ``group_key`` collapses, in each
recipient's inbox, into the row of that key's open group: the newest item
is the row, the older ones leave the list (their removal is the fan-out's
eviction, settled by the recipient's next read), and the row carries the
group's count and its last three distinct actors. A group is open while its
row is unread and listed; reading, archiving or deleting the row ends it,
and the next item of the key starts a new one. Delivery does this in
``deliver.lua`` (``_group.lua``): a few commands per recipient whatever the
group's size. The read model's ``grouping`` module owns the keys.
"""

import logging
from typing import Any

from redis.exceptions import RedisError

from core.api.exceptions import ValidationFailed
from messagecenter.models import InboxGroupEnd, InboxHidden
from messagecenter.readmodel import grouping, publish

logger = logging.getLogger(__name__)

GROUP_FIELD_MAX = 100


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
# Called after the row's own action went through (read, archived, deleted):
# the older items of the group left the list when the newer ones came, so
# what is left is to end the group (the next item of its key starts a new
# one) and, for a delete, to delete the older items too. A Redis error here
# leaves the group open: the row's own action stands, and the next item of
# the key joins the row as it would have before the action.


def _ended(user_id: int, ends: list[tuple[str, int]]) -> None:
    # PostgreSQL keeps each end: the groups are derivable from it (a rebuild
    # replays them before the items).
    InboxGroupEnd.objects.bulk_create(
        [InboxGroupEnd(user_id=user_id, group_key=key, until_ms=until) for key, until in ends], ignore_conflicts=True
    )


def group_row_read(*, user_id: int, ref: str) -> None:
    """The row was marked read (or archived): its group ends."""
    try:
        ended = grouping.group_close(user_id=user_id, ref=ref)
    except RedisError:
        logger.warning("redis unavailable; group of %s left open for user %s", ref, user_id)
        return
    if ended is not None:
        _ended(user_id, [ended])


def groups_all_read(*, user_id: int, category: str | None) -> None:
    """ "Read all" read every row: every open group (of the category) ends."""
    try:
        ended = grouping.groups_close_all(user_id=user_id, category=category)
    except RedisError:
        logger.warning("redis unavailable; groups left open for user %s", user_id)
        return
    _ended(user_id, ended)


def group_row_deleted(*, user_id: int, ref: str, now_ms: int) -> None:
    """The row was deleted: its group ends, and the group's older items are
    deleted too (a row each in PostgreSQL, as for any delete, so a rebuild
    keeps them out)."""
    try:
        ended = grouping.group_close(user_id=user_id, ref=ref)
        refs = [r for r in grouping.group_forget(user_id=user_id, ref=ref) if r != ref]
    except RedisError:
        logger.warning("redis unavailable; group of %s not deleted for user %s", ref, user_id)
        return
    if ended is not None:
        _ended(user_id, [ended])
    if not refs:
        return
    InboxHidden.objects.bulk_create([InboxHidden(user_id=user_id, item_id=r) for r in refs], ignore_conflicts=True)
    for r in refs:
        publish.user_hidden_add(user_id=user_id, ref=r, now_ms=now_ms)


def groups_rebuild() -> int:
    """Mirror every ended group into Redis (the rebuild, before the items
    arrive again, so they fall into the same groups); returns how many."""
    ends: dict[tuple[int, str], list[int]] = {}
    for user_id, key, until in InboxGroupEnd.objects.values_list("user_id", "group_key", "until_ms").iterator():
        ends.setdefault((user_id, key), []).append(until)
    for (user_id, key), times in ends.items():
        grouping.group_ends_put(user_id=user_id, group_key=key, ends=times)
    return sum(len(times) for times in ends.values())


def group_rows_acted(*, user_id: int, refs: list[str], action: str, now_ms: int) -> None:
    """A bulk action on rows: read and archive end their groups, delete
    deletes them (a row without a group changes nothing here)."""
    for ref in refs:
        if action == "delete":
            group_row_deleted(user_id=user_id, ref=ref, now_ms=now_ms)
        elif action in ("read", "archive"):
            group_row_read(user_id=user_id, ref=ref)
