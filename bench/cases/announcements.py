"""Announcements: one user's counts, and the bytes of read state per (user, announcement).

Baseline: one PostgreSQL row per (user, announcement), the way most Django
notification apps store a broadcast, measured in the same run.
"""

import random

from django.contrib.auth import get_user_model
from django.db import connection
from pyroaring import BitMap

from bench import data, incumbent_client
from bench.harness import RoundTrips, Row, measure
from core.redis import get_redis
from notices import keys as notice_keys
from notices import readmodel
from notices.models import Announcement
from notices.selectors import announcement_counts
from notices.services import announcement_mark_read

PLATFORM = "user"


def run(*, users: int, quick: bool) -> list[Row]:
    low, high = data.ensure_users(users)
    User = get_user_model()
    operator, _ = User.objects.get_or_create(username="bench-operator", defaults={"is_staff": True})
    reader = User.objects.get(pk=low + users // 2)
    rows: list[Row] = []
    data.reset_baseline_table()
    data.reset_items()
    Announcement.objects.all().delete()

    # The baseline table holds one row per user, as after a broadcast (its bytes per row below).
    data.baseline_fanout_insert_select(1, low, high)

    # 2. One user's read/unread counts with 1,000 live announcements, some read.
    live = 200 if quick else 1000
    Announcement.objects.all().delete()
    created = data.live_announcements(operator=operator, count=live)
    rng = random.Random(7)
    for a in rng.sample(created, live * 3 // 10):
        announcement_mark_read(user=reader, announcement_id=a.pk)
    expected_read = live * 3 // 10
    counts = announcement_counts(user=reader)
    assert counts == {"read": expected_read, "unread": live - expected_read}, counts

    calls = 500 if quick else 2000
    with RoundTrips(get_redis()) as trips:
        for _ in range(10):
            announcement_counts(user=reader)
    per_call = trips.count / 10
    ours = measure(lambda: announcement_counts(user=reader), repeat=calls, warmup=20)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {data.BASELINE_TABLE} (user_id, item_id, unread) "
            "SELECT %s, g, (g %% 10) >= 3 FROM generate_series(1, %s) g",
            [reader.pk, live],
        )
        cursor.execute(f"ANALYZE {data.BASELINE_TABLE}")

    def baseline_count() -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT count(*) FILTER (WHERE unread), count(*) FILTER (WHERE NOT unread) "
                f"FROM {data.BASELINE_TABLE} WHERE user_id = %s",
                [reader.pk],
            )
            cursor.fetchone()

    base = measure(baseline_count, repeat=calls, warmup=20)
    rows.append(
        Row(
            "announcements",
            f"read/unread counts, {live:,} live",
            ours.median,
            "s",
            "COUNT over rows per user",
            base.median,
            p99=ours.p99,
            baseline_p99=base.p99,
            note=f"{per_call:.0f} Redis round trip(s) per count: one script (the platforms are memoised on the "
            "request's user and carried in the cached auth snapshot)",
        )
    )

    # 3. Bytes of read state per (user, announcement): every user read it.
    client = get_redis()
    announcement = created[0]
    chunk_users = readmodel.user_slot(high)[0] + 1
    total = 0
    for chunk in range(chunk_users):
        key = notice_keys.bitmap(PLATFORM, chunk, announcement.pk)
        client.delete(key)
    # Every user a reader, written as the read model writes read bitmaps (one
    # window per chunk; a restore of read state, so not one call per mark).
    readmodel.readers_restore(readers={(PLATFORM, announcement.pk): BitMap(range(low, high + 1))})
    for chunk in range(chunk_users):
        total += client.memory_usage(notice_keys.bitmap(PLATFORM, chunk, announcement.pk), samples=0) or 0
    ours_bytes = total / users
    note = f"bitmap MEMORY USAGE {total:,} B for {users:,} readers ({ours_bytes * 8:.2f} bits each; ≤0.25 B is 2 bits)"
    measure_text = "announcement read state bytes per (user, item)"
    rows.append(
        Row(
            "memory",
            measure_text,
            ours_bytes,
            "B",
            "PostgreSQL row per recipient",
            data.baseline_bytes_per_row(),
            target=500,
            at_most=0.25,
            note=note,
        )
    )
    incumbent = incumbent_client.results(users=users, quick=quick)
    rows.append(
        Row(
            "memory",
            measure_text,
            ours_bytes,
            "B",
            f"notification row ({incumbent_client.source(incumbent)})",
            float(incumbent["bytes_per_row"]),
            target=500,
            at_most=0.25,
            note=f"theirs: pg_total_relation_size / rows after notify.send to {incumbent['rows']:,} users "
            f"({incumbent['indexes']} indexes)",
        )
    )
    return rows
