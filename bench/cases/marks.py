"""A user's mark and read-all, committed to PostgreSQL before the answer.

Several users, each with 50 push messages in a filled inbox (read once, as the
page that offers the action does), with self-healing on as in production, take turns: a mark read or unread of one
item, and a read-all of the items marked unread again before it (untimed).
Next to each, in the same run, the Redis half alone (the script a mark runs
once committed): what the write cost when Redis took it first and PostgreSQL
learned of it later. Target: the whole write's p99 at most 3 ms.
"""

import itertools
import random
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from bench import data
from bench.harness import Row, measure
from core.redis import get_redis
from durability import healing, rebuild
from messagecenter.models import InboxReadMonth, InboxSeen, MessageRecipient
from messagecenter.readmodel import inbox, to_ms
from messagecenter.selectors import inbox_counts
from messagecenter.services.inbox import inbox_mark_all_read, inbox_mark_read, inbox_mark_unread

USERS = 8
ITEMS = 50
UNREAD_BEFORE_READ_ALL = 5
TARGET_P99 = 3e-3
# Read state per user at most a fifth of one row per item read.
READ_STATE_RATIO = 5.0


def run(*, users: int, quick: bool) -> list[Row]:
    # As in production: self-healing on, so reads and marks check that the
    # user's part is filled for the generation the rebuild wrote, and each
    # write notes itself in the user's state hash around its commit.
    with override_settings(MESSAGECENTER_SELF_HEALING=True):
        try:
            return _run(quick=quick)
        finally:
            healing.forget()


def _run(*, quick: bool) -> list[Row]:
    User = get_user_model()
    get_redis().flushdb()
    healing.forget()
    data.reset_items()
    rebuild.rebuild()
    assert healing.check(fresh=True)
    assert healing.user_generation()
    operator, _ = User.objects.get_or_create(username="bench-marks-operator")
    readers = [User.objects.get_or_create(username=f"bench-marks-{i}")[0] for i in range(USERS)]
    refs = data.inbox_messages(operator=operator, audiences=[(ITEMS, [int(u.pk) for u in readers])])
    for reader in readers:
        assert inbox_counts(user=reader)["unread"] == ITEMS  # filled and placed, as a page read leaves it
    rng = random.Random(11)
    calls = 200 if quick else 1000

    # --- one mark: read and unread in turns, the users in turns ---------------------------------
    turns = itertools.cycle([(reader, read) for read in (True, False) for reader in readers])

    def mark() -> None:
        reader, read = next(turns)
        (inbox_mark_read if read else inbox_mark_unread)(user=reader, item_id=rng.choice(refs))

    ours = measure(mark, repeat=calls, warmup=20)

    def redis_half() -> None:
        reader, read = next(turns)
        inbox.inbox_set_read(user_id=int(reader.pk), ref=rng.choice(refs), read=read, now_ms=to_ms(timezone.now()))

    theirs = measure(redis_half, repeat=calls, warmup=20)
    rows = [
        _row(
            "mark read / unread",
            f"one item of {ITEMS}, {USERS} users in turns",
            ours,
            theirs,
            "the Redis half alone (the Redis-first write)",
        )
    ]

    # --- read-all: a few items marked unread again first (untimed) -----------------------------
    for reader in readers:  # what the marks above left unread
        inbox_mark_all_read(user=reader)
    users_cycle = itertools.cycle(readers)
    current: list[Any] = []

    def unread_some() -> None:
        reader = next(users_cycle)
        current[:] = [reader]
        for ref in rng.sample(refs, UNREAD_BEFORE_READ_ALL):
            inbox_mark_unread(user=reader, item_id=ref)

    counts: list[int] = []
    ours = measure(
        lambda: counts.append(inbox_mark_all_read(user=current[0])), repeat=calls // 5, warmup=0, setup=unread_some
    )
    assert set(counts) == {UNREAD_BEFORE_READ_ALL}, set(counts)

    def unread_some_redis() -> None:
        reader = next(users_cycle)
        current[:] = [reader]
        for ref in rng.sample(refs, UNREAD_BEFORE_READ_ALL):
            inbox.inbox_set_read(user_id=int(reader.pk), ref=ref, read=False, now_ms=to_ms(timezone.now()))

    def read_all_redis() -> None:
        now_ms = to_ms(timezone.now())
        inbox.inbox_read_all(user_id=int(current[0].pk), category=None, now_ms=now_ms, max_score=now_ms)

    theirs = measure(read_all_redis, repeat=calls // 5, setup=unread_some_redis)
    rows.append(
        _row(
            "read-all",
            f"{UNREAD_BEFORE_READ_ALL} unread of {ITEMS}, {USERS} users in turns",
            ours,
            theirs,
            "the Redis half alone (the Redis-first read-all)",
        )
    )
    rows.extend(_read_state_bytes(operator, rng, users=200 if quick else 1_000))
    return rows


def _read_state_bytes(operator: Any, rng: random.Random, *, users: int) -> list[Row]:
    """PostgreSQL's bytes per user of read state, for users who each read all of
    ITEMS push messages (read-all), then marked three unread again and one
    read: next to one row per (user, item read), what a row-per-recipient app
    keeps. And the recipient rows a fan-out wrote, per (user, pushed item)."""
    User = get_user_model()
    readers = [User.objects.get_or_create(username=f"bench-state-{i}")[0] for i in range(users)]
    refs = data.inbox_messages(operator=operator, audiences=[(ITEMS, [int(u.pk) for u in readers])])
    for reader in readers:
        inbox_mark_all_read(user=reader)
        for ref in rng.sample(refs, 3):
            inbox_mark_unread(user=reader, item_id=ref)
        inbox_mark_read(user=reader, item_id=rng.choice(refs))
    state_tables = [model._meta.db_table for model in (InboxReadMonth, InboxSeen)]
    holders = InboxReadMonth.objects.values("user").distinct().count()  # these users and the timed ones
    ours = sum(_table_bytes(table) for table in state_tables) / holders
    data.reset_baseline_table()
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {data.BASELINE_TABLE} (user_id, item_id, unread) "
            "SELECT u, i, false FROM generate_series(1, %s) u, generate_series(1, %s) i",
            [users, ITEMS],
        )
    theirs = data.baseline_bytes_per_row() * ITEMS
    recipient_rows = MessageRecipient.objects.count()
    per_recipient = _table_bytes(MessageRecipient._meta.db_table) / max(recipient_rows, 1)
    return [
        Row(
            "read state in PostgreSQL",
            f"bytes per user who read all {ITEMS} items, then marked 4 (InboxReadMonth + InboxSeen, "
            "tables and indexes)",
            ours,
            "B",
            f"one row per (user, item read): {ITEMS} rows of a row-per-recipient table",
            theirs,
            target=READ_STATE_RATIO,
            note=f"{holders:,} users; pg_total_relation_size after VACUUM FULL / users; "
            f"recipient rows (the fill's index of pushed items): {per_recipient:,.0f} B per (user, pushed item)",
        )
    ]


def _table_bytes(table: str) -> int:
    """The table's bytes with its indexes, rewritten first: the rows of earlier
    runs, deleted, would still count."""
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM FULL ANALYZE {table}")
        cursor.execute("SELECT pg_total_relation_size(%s)", [table])
        return int(cursor.fetchone()[0])


def _row(case: str, what: str, ours: Any, theirs: Any, baseline: str) -> Row:
    return Row(
        case,
        f"{what}: committed to PostgreSQL, then Redis",
        ours.median,
        "s",
        baseline,
        theirs.median,
        p99=ours.p99,
        baseline_p99=theirs.p99,
        at_most=TARGET_P99,
        ceiling_on_p99=True,
        note="ours: the service (PostgreSQL commit of the read state, then the Redis script); "
        "baseline: the same Redis script with no PostgreSQL write",
    )
