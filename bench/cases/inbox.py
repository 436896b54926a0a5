"""The inbox (issue 4): first page with counts, push fan-out rate, pull publish
time, and Redis bytes per (user, message), each next to a one-row-per-recipient
PostgreSQL baseline measured in the same run."""

import random
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone

from bench import data
from bench.harness import RoundTrips, Row, measure
from core import keys
from core.redis import get_redis
from messagecenter.models import Bulletin, Message, UserGroup, UserGroupMembership
from messagecenter.selectors import inbox_counts, inbox_list
from messagecenter.services.bulletins import bulletin_create
from messagecenter.services.inbox import inbox_mark_read
from messagecenter.services.messages import message_send

FANOUT = 10_000


def _send(operator: object, **audience: object) -> Message:
    with transaction.atomic():  # delivery runs after commit (eager Celery here): part of the cost
        return message_send(sender=operator, category="system", title="Hello", body_html="<p>Hi</p>", **audience)


def _user_keys(user_id: int) -> list[str]:
    client = get_redis()
    months = [m.decode() for m in client.smembers(keys.mc_inbox_months(user_id))]
    names = [
        keys.mc_inbox(user_id),
        keys.mc_inbox_counters(user_id),
        keys.mc_inbox_state(user_id),
        keys.mc_inbox_months(user_id),
        *(keys.mc_inbox_category(user_id, c) for c in ("system", "promotion", "transaction", "interaction")),
        *(keys.mc_push_bitmap(user_id, m) for m in months),
        *(keys.mc_read_bitmap(user_id, m) for m in months),
    ]
    return [k for k in names if client.exists(k)]


def run(*, users: int, quick: bool) -> list[Row]:
    low, high = data.ensure_users(users)
    User = get_user_model()
    operator, _ = User.objects.get_or_create(username="bench-operator", defaults={"is_staff": True})
    rows: list[Row] = []
    data.reset_baseline_table()
    Message.objects.all().delete()
    Bulletin.objects.all().delete()
    UserGroup.objects.filter(name="bench-fanout").delete()
    get_redis().flushdb()

    # --- push fan-out to 10,000 recipients (a group below the push threshold) -------------
    fanout = min(FANOUT, users)
    group = UserGroup.objects.create(name="bench-fanout")
    UserGroupMembership.objects.bulk_create(
        UserGroupMembership(group=group, user_id=uid) for uid in range(low, low + fanout)
    )
    with override_settings(MESSAGECENTER_PUSH_THRESHOLD=fanout + 1):
        _send(operator, group_ids=[group.pk])  # warm-up
        pushes = measure(lambda: _send(operator, group_ids=[group.pk]), repeat=3 if quick else 5, warmup=0)
    item = iter(range(1, 10_000_000))
    base = measure(
        lambda: data.baseline_fanout_insert_select(next(item), low, low + fanout - 1),
        repeat=3 if quick else 5,
        warmup=1,
    )
    rows.append(
        Row(
            "inbox",
            f"push fan-out to {fanout:,} recipients",
            fanout / pushes.median,
            "/s",
            "INSERT ... SELECT row per recipient",
            fanout / base.median,
            better="higher",
            note=f"recipient-writes per second; one send took {pushes.median * 1e3:.0f} ms (pipelined chunks of "
            "MESSAGECENTER_FANOUT_CHUNK, each recipient's zsets, push bitmap and counters in one script)",
        )
    )

    # --- Redis bytes per (user, message), over a sample of those recipients -------------------
    client = get_redis()
    sample = random.Random(3).sample(range(low, low + fanout), 100)
    per_user_items = client.zcard(keys.mc_inbox(sample[0]))
    total = sum(client.memory_usage(k, samples=0) or 0 for uid in sample for k in _user_keys(uid))
    rows.append(
        Row(
            "inbox",
            "Redis bytes per (user, message)",
            total / (len(sample) * per_user_items),
            "B",
            "PostgreSQL row per recipient",
            data.baseline_bytes_per_row(),
            note=f"MEMORY USAGE of every per-user key of {len(sample)} recipients holding {per_user_items} items each "
            "(inbox and category zsets, counters, state, push/read bitmaps); details are stored once per message",
        )
    )

    # --- pull publish to everyone ----------------------------------------------------------
    pulls = measure(lambda: _send(operator, everyone=True), repeat=5 if quick else 10, warmup=1)
    base = measure(lambda: data.baseline_fanout_insert_select(next(item), low, high), repeat=3, warmup=1)
    rows.append(
        Row(
            "inbox",
            f"pull publish to {users:,} users (everyone)",
            pulls.median,
            "s",
            "INSERT ... SELECT row per user",
            base.median,
            p99=pulls.p99,
            target=100,
        )
    )

    # --- a user's first page with counts: 1,000 items, 30 % read, bulletins to merge -----------
    Message.objects.all().delete()
    client.flushdb()
    reader = User.objects.get(pk=low + fanout // 2)
    items = 200 if quick else 1000
    with override_settings(MESSAGECENTER_PUSH_THRESHOLD=10):
        for i in range(items):
            message = _send(operator, user_ids=[reader.pk, low + (i % 50)])
            if i % 10 < 3:
                inbox_mark_read(user=reader, item_id=message.ref)
    now = timezone.now()
    for i in range(5):
        bulletin_create(
            title=f"Bulletin {i}", body_html="<p>b</p>", display_time=now - timedelta(minutes=i), actor=operator
        )
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {data.BASELINE_TABLE} (user_id, item_id, unread, created) "
            "SELECT %s, g, (g %% 10) >= 3, now() - g * interval '1 second' FROM generate_series(1, %s) g",
            [reader.pk, items + 5],
        )
        cursor.execute(f"ANALYZE {data.BASELINE_TABLE}")

    first = inbox_list(user=reader, limit=20)  # merges the bulletins once
    assert len(first.results) == 20, first
    calls = 500 if quick else 2000

    def page() -> None:
        inbox_list(user=reader, limit=20)
        inbox_counts(user=reader)

    with RoundTrips(client) as trips:
        for _ in range(10):
            page()
    ours = measure(page, repeat=calls, warmup=50)

    def baseline_page() -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id, item_id, category, unread, created FROM {data.BASELINE_TABLE} "
                "WHERE user_id = %s ORDER BY created DESC LIMIT 20",
                [reader.pk],
            )
            cursor.fetchall()
            cursor.execute(
                f"SELECT category, count(*) FROM {data.BASELINE_TABLE} WHERE user_id = %s AND unread GROUP BY category",
                [reader.pk],
            )
            cursor.fetchall()

    base = measure(baseline_page, repeat=calls, warmup=50)
    rows.append(
        Row(
            "inbox",
            f"first page + counts ({items:,} items, 30% read, 5 bulletins)",
            ours.median,
            "s",
            "two indexed SELECTs on rows per user",
            base.median,
            p99=ours.p99,
            baseline_p99=base.p99,
            note=f"in process, selectors only; {trips.count / 10:.0f} Redis round trips per page with counts "
            "(announcement counts included)",
        )
    )
    held = client.zcard(keys.mc_inbox(reader.pk))
    reader_bytes = sum(client.memory_usage(k, samples=0) or 0 for k in _user_keys(reader.pk))
    rows.append(
        Row(
            "inbox",
            f"Redis bytes per (user, message), {held:,} items held",
            reader_bytes / held,
            "B",
            "PostgreSQL row per recipient",
            data.baseline_bytes_per_row(),
            note="the same per-user keys for one user with a full inbox: the fixed per-user cost is amortised",
        )
    )
    return rows
