"""One user's own rows in PostgreSQL, besides their items, in one statement,
and the items pushed to them in another.

Both ways of computing an inbox from PostgreSQL read these two statements:
the fill, which writes them to Redis (``messagecenter.fill``), and the inbox
served from PostgreSQL while Redis is down (``messagecenter.fallback``), which
places them itself. Seven small
tables, each read by its index on the user, come back in one ``UNION ALL``
(portable: PostgreSQL and SQLite), one round trip instead of seven.
"""

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache

from django.db import connection
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from messagecenter.items import ENTRY_FIELDS
from messagecenter.models import (
    DeliveryMode,
    InboxGroupEnd,
    InboxHidden,
    InboxItemState,
    InboxReadMonth,
    InboxSeen,
    Message,
    MessageRecipient,
    MessageResponse,
    MessageStatus,
    MutePeriod,
    Notification,
    NotificationRecipient,
    UserGroupMembership,
)
from messagecenter.mutes import Mutes
from messagecenter.readmodel import InboxEntry, to_ms
from messagecenter.readmodel import responses as responses_rm


@dataclass
class UserRows:
    """What PostgreSQL keeps of one user's own state, besides their items."""

    months: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)  # month -> (read, ever) bit-sets
    seen_ms: int | None = None
    group_ids: list[int] = field(default_factory=list)
    # Archived or snoozed refs -> (archived, snoozed until ms or None).
    places: dict[str, tuple[bool, int | None]] = field(default_factory=dict)
    mute_rows: list[tuple[str, int | None, int, int | None]] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    ends: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # group key -> (until ms, row ref)

    @property
    def mutes(self) -> Mutes:
        return Mutes.of(self.mute_rows)

    @property
    def parked(self) -> list[str]:
        return list(self.places)


@cache
def _rows_sql(vendor: str) -> str:
    """The columns are (kind, text, number, number, number, bytes, bytes,
    text); a branch fills the ones it has and leaves the rest NULL."""
    n = "CAST(NULL AS BIGINT)"  # typed: PostgreSQL would take a bare NULL of the first branch for text
    until = _ms("snoozed_until", vendor)
    branches = [
        ("r", InboxReadMonth, f"NULL, month, {n}, {n}, read, ever, NULL"),
        ("s", InboxSeen, f"NULL, seen_ms, {n}, {n}, NULL, NULL, NULL"),
        ("g", UserGroupMembership, f"NULL, group_id, {n}, {n}, NULL, NULL, NULL"),
        ("p", InboxItemState, f"item_id, CASE WHEN archived THEN 1 ELSE 0 END, {until}, {n}, NULL, NULL, NULL"),
        ("m", MutePeriod, "category, message_type_id, start_ms, end_ms, NULL, NULL, NULL"),
        ("h", InboxHidden, f"item_id, {n}, {n}, {n}, NULL, NULL, NULL"),
        ("e", InboxGroupEnd, f"group_key, until_ms, {n}, {n}, NULL, NULL, row_ref"),
    ]
    return " UNION ALL ".join(
        f"SELECT '{kind}', {columns} FROM {model._meta.db_table} WHERE user_id = %s"  # noqa: S608 (our own names)
        for kind, model, columns in branches
    )


def user_rows(user_id: int) -> UserRows:
    """The user's read months, watermark, memberships, parked items (where
    they are) and hidden ones, mute periods and ended groups."""
    rows = UserRows()
    with connection.cursor() as cursor:
        cursor.execute(_rows_sql(connection.vendor), [user_id] * 7)
        for kind, text, a, b, c, read, ever, text2 in cursor.fetchall():
            if kind == "r":
                rows.months[int(a)] = (bytes(read), bytes(ever))
            elif kind == "s":
                rows.seen_ms = int(a)
            elif kind == "g":
                rows.group_ids.append(int(a))
            elif kind == "p":
                rows.places[str(text)] = (bool(a), None if b is None else _ms_of(b))
            elif kind == "h":
                rows.hidden.append(str(text))
            elif kind == "m":
                rows.mute_rows.append((text, a, int(b), c))
            else:
                rows.ends.setdefault(str(text), []).append((int(a), str(text2)))
    return rows


@dataclass
class UserItems:
    """The items pushed to the user: their live pushed messages and
    notifications (with the notification's message type, else None), newest of
    each kind first, and the user's answers to live messages' actions."""

    entries: list[tuple[InboxEntry, int | None]] = field(default_factory=list)
    answers: dict[str, tuple[int, int]] = field(default_factory=dict)  # ref -> (action index, at ms)

    def kept(self, *, mutes: Mutes, hidden: set[str]) -> list[InboxEntry]:
        """The entries the user keeps: neither hidden nor arrived while the user
        muted them (``messagecenter.mutes``), in the order read."""
        return [
            entry
            for entry, type_id in self.entries
            if entry.ref not in hidden
            and (mutes.empty or not mutes.hides(category=entry.category, time_ms=entry.score, message_type_id=type_id))
        ]


def _ms(column: str, vendor: str) -> str:
    """``column`` (a timestamp) as the cursor should give it: on PostgreSQL its
    milliseconds since the epoch, computed as ``to_ms`` does (the seconds as a
    double, times 1000, truncated; a test holds them equal): loading a
    timestamptz costs psycopg about 4 µs, a third of a large fill's time in
    Python. Elsewhere the timestamp itself, which ``_ms_of`` converts."""
    if vendor == "postgresql":
        return f"CAST(TRUNC(DATE_PART('epoch', {column}) * 1000) AS BIGINT)"
    return column


@cache
def _items_sql(vendor: str) -> str:
    """Three branches, each on the user's own rows (recipient rows, answers):
    the columns are (kind, message type id, *ENTRY_FIELDS) with the times in
    ms where ``_ms`` can; the answers' branch puts the action in ``category``,
    its time in ``created_at`` and the message's actions (JSON text) in
    ``group_key``."""
    m, mr = Message._meta.db_table, MessageRecipient._meta.db_table
    n, nr = Notification._meta.db_table, NotificationRecipient._meta.db_table
    a = MessageResponse._meta.db_table
    columns = ", ".join(_ms("x." + c, vendor) if c in ("created_at", "expire_at") else "x." + c for c in ENTRY_FIELDS)
    live = "x.status IN (%s, %s) AND (x.expire_at IS NULL OR x.expire_at > %s)"
    messages = (
        f"SELECT 'm' AS kind, CAST(NULL AS BIGINT) AS type_id, {columns} "  # noqa: S608 (our own names)
        f"FROM {m} x JOIN {mr} r ON r.message_id = x.id WHERE r.user_id = %s AND x.delivery = %s AND {live} "
        "ORDER BY x.created_at DESC, x.id DESC LIMIT %s"
    )
    notifications = (
        f"SELECT 'n', x.message_type_id, {columns} "  # noqa: S608 (our own names)
        f"FROM {n} x JOIN {nr} r ON r.notification_id = x.id "
        "WHERE r.user_id = %s AND x.withdrawn = %s AND x.scheduled = %s AND x.expire_at > %s "
        "ORDER BY x.created_at DESC, x.id DESC LIMIT %s"
    )
    answers = (
        f"SELECT 'a', NULL, r.message_id, r.action, NULL, NULL, {_ms('r.at', vendor)}, NULL, "  # noqa: S608 (our own names)
        f"CAST(x.actions AS TEXT), NULL FROM {a} r JOIN {m} x ON x.id = r.message_id WHERE r.user_id = %s AND {live}"
    )
    return f"SELECT * FROM ({messages}) ms UNION ALL SELECT * FROM ({notifications}) ns UNION ALL {answers}"  # noqa: S608


def user_items(user_id: int, *, now: datetime, want: int) -> UserItems:
    """The user's live pushed messages and notifications, newest first, enough
    of each kind for ``want`` rows of the inbox, and answers to live messages.

    An inbox's cap counts rows, and the items of one group key share rows:
    counted once (a lower bound: ended groups make more rows), the newest
    ``want`` items of a kind may make fewer rows than ``want``. Then the
    statement runs again for twice as many, until a kind has its rows or
    has no more items; an inbox with few groups is read once."""
    limit = want
    while True:
        items = _user_items(user_id, now=now, limit=limit)
        if all(_enough(items, kind, want=want, limit=limit) for kind in "mn"):
            return items
        limit *= 2


class RowsSeen:
    """How many inbox rows the entries added so far make, at least: an
    ungrouped one makes its own, the items of one group key count once (a
    lower bound: ended groups make more rows). A newest-first read that
    has seen enough rows can stop."""

    def __init__(self) -> None:
        self.rows = 0
        self.keys: set[str] = set()

    def add(self, group_key: str) -> int:
        """Count one more entry (its group key, "" for none); the rows so far."""
        if not group_key:
            self.rows += 1
        elif group_key not in self.keys:
            self.keys.add(group_key)
            self.rows += 1
        return self.rows


def _enough(items: UserItems, kind: str, *, want: int, limit: int) -> bool:
    """Whether the read has ``want`` rows of this kind, or all its items (fewer than ``limit``)."""
    seen, count = RowsSeen(), 0
    for entry, _type in items.entries:
        if entry.ref[0] == kind:
            count += 1
            seen.add(entry.group_key)
    return seen.rows >= want or count < limit


def _user_items(user_id: int, *, now: datetime, limit: int) -> UserItems:
    """At most ``limit`` of each kind, in one statement: raw SQL, where three
    querysets cost four times as much to build as to run."""
    stamp = connection.ops.adapt_datetimefield_value(now)
    live = [MessageStatus.DELIVERING, MessageStatus.DELIVERED, stamp]
    params = [
        *(user_id, DeliveryMode.PUSH, *live, limit),
        *(user_id, False, False, stamp, limit),
        *(user_id, *live),
    ]
    items = UserItems()
    with connection.cursor() as cursor:
        cursor.execute(_items_sql(connection.vendor), params)
        for kind, type_id, pk, text, month, offset, at, expire_at, text2, actor in cursor.fetchall():
            if kind == "a":
                actions = json.loads(text2) if isinstance(text2, str) else text2
                items.answers[f"m{pk}"] = (responses_rm.action_index(actions, text), _ms_of(at))
                continue
            entry = InboxEntry(
                ref=f"{kind}{pk}",
                category=text,
                month=month,
                offset=offset,
                score=_ms_of(at),
                expire_ms=_ms_of(expire_at) if expire_at is not None else 0,
                group_key=text2,
                actor=actor,
            )
            items.entries.append((entry, None if type_id is None else int(type_id)))
    return items


def _ms_of(value: int | datetime | str) -> int:
    """A time as the raw cursor gives it, in ms: already ms on PostgreSQL (``_ms``);
    SQLite keeps UTC without an offset, and gives text where a branch of a UNION
    hides the column's declared type."""
    if isinstance(value, int):
        return value
    parsed = value if isinstance(value, datetime) else parse_datetime(value)
    if parsed is None:
        raise ValueError(f"not a datetime: {value!r}")
    return to_ms(parsed if timezone.is_aware(parsed) else parsed.replace(tzinfo=UTC))
