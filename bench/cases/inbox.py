"""The inbox: first page with counts, push fan-out rate, pull publish
time, and Redis bytes per (user, message), each next to a one-row-per-recipient
PostgreSQL baseline measured in the same run."""

import random
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone

from bench import data, http_load, incumbent_client
from bench.harness import RoundTrips, Row, measure
from core.redis import get_redis
from messagecenter import keys as mc_keys
from messagecenter.models import Message, MessageRecipient, UserGroup, UserGroupMembership
from messagecenter.selectors import inbox_list
from messagecenter.services.bulletins import bulletin_create
from messagecenter.services.inbox import inbox_mark_read
from messagecenter.services.messages import message_send
from messagecenter.services.recipients import recipients_add

FANOUT = 10_000


def _send(operator: Any, **audience: Any) -> Message:
    with transaction.atomic():  # delivery runs after commit (eager Celery here): part of the cost
        return message_send(sender=operator, category="system", title="Hello", body_html="<p>Hi</p>", **audience)


def _user_keys(user_id: int) -> list[bytes]:
    return data.user_redis_keys(user_id)


def _recipient_rows(message: Message, user_ids: list[int], quick: bool) -> Row:
    """The rows a push writes before its Redis write (``recipients_add``: the
    users' ids in one parameter the database expands), next to Django's
    ``bulk_create(..., ignore_conflicts=True)`` of the same rows, each into a
    message with none (deleted before every call)."""

    def clear() -> None:
        MessageRecipient.objects.filter(message=message).delete()

    def orm() -> None:
        MessageRecipient.objects.bulk_create(
            [MessageRecipient(user_id=u, message_id=message.pk) for u in user_ids],
            batch_size=1000,
            ignore_conflicts=True,
        )

    repeat = 3 if quick else 5
    ours = measure(lambda: recipients_add(item=message, user_ids=user_ids), repeat=repeat, warmup=1, setup=clear)
    theirs = measure(orm, repeat=repeat, warmup=1, setup=clear)
    return Row(
        "push fan-out",
        f"recipient rows of a push to {len(user_ids):,} users (PostgreSQL's half of the fan-out)",
        ours.median,
        "s",
        "bulk_create(ignore_conflicts=True), 1,000 a statement",
        theirs.median,
        p99=ours.p99,
        baseline_p99=theirs.p99,
        target=2.0,
        note="the ids go as one array that PostgreSQL expands (unnest) in one INSERT ... ON CONFLICT DO NOTHING;"
        " bulk_create builds a model per row and sends two parameters each",
    )


def run(*, users: int, quick: bool) -> list[Row]:
    low, _high = data.ensure_users(users)
    User = get_user_model()
    operator, _ = User.objects.get_or_create(username="bench-operator", defaults={"is_staff": True})
    rows: list[Row] = []
    data.reset_baseline_table()
    data.reset_items()
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
            "push fan-out",
            f"push fan-out to {fanout:,} recipients",
            fanout / pushes.median,
            "/s",
            "INSERT ... SELECT row per recipient",
            fanout / base.median,
            better="higher",
            at_least=100_000,
            note=f"recipient-writes per second; one send took {pushes.median * 1e3:.0f} ms (pipelined chunks of "
            "MESSAGECENTER_FANOUT_CHUNK; each recipient's arrival, its inbox zset, arrivals, month and live version, "
            "in one script; the next read places it)",
        )
    )

    # --- the push's recipient rows: one statement, or the ORM's bulk_create -----------------
    rows.append(_recipient_rows(_send(operator, group_ids=[group.pk]), list(range(low, low + fanout)), quick))

    # --- Redis bytes per (user, message), over a sample of those recipients -------------------
    client = get_redis()
    sample = random.Random(3).sample(range(low, low + fanout), 100)
    per_user_items = client.zcard(mc_keys.inbox(sample[0]))
    total = sum(client.memory_usage(k, samples=0) or 0 for uid in sample for k in _user_keys(uid))
    rows.append(
        Row(
            "memory",
            "inbox Redis bytes per (user, message), push recipients",
            total / (len(sample) * per_user_items),
            "B",
            "PostgreSQL row per recipient",
            data.baseline_bytes_per_row(),
            note=f"MEMORY USAGE of every per-user key of {len(sample)} recipients holding {per_user_items} items each "
            "(every key of their hash tag: zsets, counters, state, push/read bitmaps); details are stored once per message",
        )
    )

    # --- a user's first page with counts: 1,000 items, 30% read, bulletins to merge -----------
    data.reset_items()
    client.flushdb()
    data.reset_baseline_table()
    reader = User.objects.get(pk=low + fanout // 2)
    items = incumbent_client.shapes(quick=quick).page_items
    # Each item also goes to one of 50 other users, as a small push would.
    refs: list[str] = []
    for start in range(0, items, items // 50):
        refs += data.inbox_messages(
            operator=operator, audiences=[(items // 50, [reader.pk, low + (start // (items // 50))])]
        )
    for i, ref in enumerate(refs):
        if i % 10 < 3:
            inbox_mark_read(user=reader, item_id=ref)
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
    assert first.unread_count == items - items * 3 // 10 + 5, first.unread_count
    calls = 500 if quick else 2000

    def page() -> None:
        # What GET /api/v1/inbox/ asks of the read model: the page carries its counts.
        inbox_list(user=reader, limit=20)

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
                f"SELECT count(*) FROM {data.BASELINE_TABLE} WHERE user_id = %s AND unread",
                [reader.pk],
            )
            cursor.fetchone()

    base = measure(baseline_page, repeat=calls, warmup=50)
    incumbent = incumbent_client.results(users=users, quick=quick)
    theirs = incumbent["page"]
    label = f"first page + counts ({items:,} items, 30% read, 5 bulletins)"
    note = (
        f"in process, the selector behind GET /api/v1/inbox/ (page of 20 with unread and unseen counts); "
        f"{trips.count / 10:.0f} Redis round trip(s) per page"
    )
    rows.append(
        Row(
            "inbox",
            label,
            ours.median,
            "s",
            "two indexed SELECTs on rows per user",
            base.median,
            p99=ours.p99,
            baseline_p99=base.p99,
            at_most=1e-3,
            ceiling_on_p99=True,
            note=note,
        )
    )
    # The incumbent's page is the first 20 unread with the unread count: ours
    # with the same filter and page size is the unread-only page (?unread=true).
    unread_first = inbox_list(user=reader, limit=20, unread_only=True)
    assert len(unread_first.results) == 20, unread_first
    assert not any(row.read for row in unread_first.results), unread_first.results
    ours_unread = measure(lambda: inbox_list(user=reader, limit=20, unread_only=True), repeat=calls, warmup=50)
    rows.append(
        Row.timed(
            "inbox",
            f"first 20 unread + counts ({items:,} items, 30% read, 5 bulletins)",
            ours_unread,
            f"first 20 unread + unread count ({incumbent_client.source(incumbent)})",
            theirs,
            at_most=1e-3,
            ceiling_on_p99=True,
            note=f"ours: the selector behind GET /api/v1/inbox/?unread=true (same filter and page size as theirs); "
            f"theirs: what its live_unread_notification_list does, for a user with {theirs['items']:,} "
            f"notifications ({theirs['read']} read)",
        )
    )
    held = client.zcard(mc_keys.inbox(reader.pk))
    reader_bytes = sum(client.memory_usage(k, samples=0) or 0 for k in _user_keys(reader.pk))
    rows.append(
        Row(
            "memory",
            f"inbox Redis bytes per (user, message), {held:,} items held",
            reader_bytes / held,
            "B",
            f"notification row ({incumbent_client.source(incumbent)})",
            float(incumbent["bytes_per_row"]),
            note="every per-user key of one user with a full inbox (the fixed per-user cost amortised); "
            "details are stored once per message, not per user",
        )
    )

    # --- the same page over HTTP, next to a trivial DRF endpoint ----------------------------------
    rows += _http(reader=reader, quick=quick)
    return rows


def _http(*, reader: Any, quick: bool) -> list[Row]:
    from accounts.tokens import token_issue

    token = token_issue(user=reader).token
    seconds = 3 if quick else 10
    with http_load.gunicorn() as base:
        http_load.wait_ready(base, token)
        status, body = http_load.get(f"{base}/api/v1/inbox/", token)
        assert status == 200, (status, body)
        assert len(body["results"]) == 20, body
        ping_status, _ = http_load.get(f"{base}/bench/ping", token)
        assert ping_status == 200, ping_status
        # Warm both (every worker's connections, caches) before measuring.
        http_load.wrk(url=f"{base}/bench/ping", token=token, seconds=1)
        http_load.wrk(url=f"{base}/api/v1/inbox/", token=token, seconds=1)
        ping = http_load.wrk(url=f"{base}/bench/ping", token=token, seconds=seconds)
        inbox = http_load.wrk(url=f"{base}/api/v1/inbox/", token=token, seconds=seconds)
    failures = ping.non_2xx + ping.errors + inbox.non_2xx + inbox.errors
    return [
        Row(
            "inbox over HTTP",
            "GET /api/v1/inbox/ requests/s",
            inbox.rps,
            "/s",
            "GET /bench/ping (trivial DRF view, same auth)",
            ping.rps,
            better="higher",
            target=0.7,
            failures=failures,
            note=f"gunicorn {http_load.WORKERS} sync workers, wrk {http_load.CONNECTIONS} connections for "
            f"{seconds} s each on loopback (same 2 cores): inbox {inbox.requests:,} requests, p50 "
            f"{inbox.p50 * 1e3:.2f} ms, p99 {inbox.p99 * 1e3:.2f} ms, {inbox.non_2xx} non-2xx, {inbox.errors} "
            f"socket errors; ping {ping.requests:,} requests, p50 {ping.p50 * 1e3:.2f} ms, p99 "
            f"{ping.p99 * 1e3:.2f} ms, {ping.non_2xx} non-2xx, {ping.errors} socket errors",
        )
    ]
