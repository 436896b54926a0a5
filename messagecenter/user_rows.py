"""One user's own rows in PostgreSQL, besides their items, in one statement.

Both ways of computing an inbox from PostgreSQL start here: the fill, which
writes them to Redis (``messagecenter.fill``), and the inbox served from
PostgreSQL while Redis is down (``messagecenter.fallback``). Seven small
tables, each read by its index on the user, come back in one ``UNION ALL``
(portable: PostgreSQL and SQLite), one round trip instead of seven.
"""

from dataclasses import dataclass, field
from functools import cache

from django.db import connection

from messagecenter.models import (
    InboxGroupEnd,
    InboxHidden,
    InboxItemState,
    InboxReadMonth,
    InboxSeen,
    MutePeriod,
    UserGroupMembership,
)
from messagecenter.mutes import Mutes


@dataclass
class UserRows:
    """What PostgreSQL keeps of one user's own state, besides their items."""

    months: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)  # month -> (read, ever) bit-sets
    seen_ms: int | None = None
    group_ids: list[int] = field(default_factory=list)
    parked: list[str] = field(default_factory=list)  # archived or snoozed refs
    mute_rows: list[tuple[str, int | None, int, int | None]] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    ends: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # group key -> (until ms, row ref)

    @property
    def mutes(self) -> Mutes:
        return Mutes.of(self.mute_rows)


@cache
def _rows_sql() -> str:
    """The columns are (kind, text, number, number, number, bytes, bytes,
    text); a branch fills the ones it has and leaves the rest NULL."""
    n = "CAST(NULL AS BIGINT)"  # typed: PostgreSQL would take a bare NULL of the first branch for text
    branches = [
        ("r", InboxReadMonth, f"NULL, month, {n}, {n}, read, ever, NULL"),
        ("s", InboxSeen, f"NULL, seen_ms, {n}, {n}, NULL, NULL, NULL"),
        ("g", UserGroupMembership, f"NULL, group_id, {n}, {n}, NULL, NULL, NULL"),
        ("p", InboxItemState, f"item_id, {n}, {n}, {n}, NULL, NULL, NULL"),
        ("m", MutePeriod, "category, message_type_id, start_ms, end_ms, NULL, NULL, NULL"),
        ("h", InboxHidden, f"item_id, {n}, {n}, {n}, NULL, NULL, NULL"),
        ("e", InboxGroupEnd, f"group_key, until_ms, {n}, {n}, NULL, NULL, row_ref"),
    ]
    return " UNION ALL ".join(
        f"SELECT '{kind}', {columns} FROM {model._meta.db_table} WHERE user_id = %s"  # noqa: S608 (our own names)
        for kind, model, columns in branches
    )


def user_rows(user_id: int) -> UserRows:
    """The user's read months, watermark, memberships, parked and hidden
    items, mute periods and ended groups."""
    rows = UserRows()
    with connection.cursor() as cursor:
        cursor.execute(_rows_sql(), [user_id] * 7)
        for kind, text, a, b, c, read, ever, text2 in cursor.fetchall():
            if kind == "r":
                rows.months[int(a)] = (bytes(read), bytes(ever))
            elif kind == "s":
                rows.seen_ms = int(a)
            elif kind == "g":
                rows.group_ids.append(int(a))
            elif kind in "ph":
                (rows.parked if kind == "p" else rows.hidden).append(str(text))
            elif kind == "m":
                rows.mute_rows.append((text, a, int(b), c))
            else:
                rows.ends.setdefault(str(text), []).append((int(a), str(text2)))
    return rows
