"""Unread counts for a user with 1,000 live announcements and
10,000 inbox items (30% read), and mark-all-read of 10,000 unread items, each
against django-notifications-hq on the same shapes (its unread().count() over
11,000 notifications, its mark_all_as_read() of 10,000). Also the read state's
bytes per (user, item) on the inbox side."""

import random
from typing import Any

from django.contrib.auth import get_user_model

from bench import data, incumbent_client
from bench.harness import RoundTrips, Row, measure
from core.redis import get_redis
from messagecenter import keys as mc_keys
from messagecenter.models import ItemSlotMonth
from messagecenter.selectors import inbox_counts
from messagecenter.services.inbox import inbox_mark_all_read, inbox_mark_read
from notices.models import Announcement
from notices.services import announcement_mark_read


def _user_keys(user_id: int) -> list[bytes]:
    return data.user_redis_keys(user_id)


def _dump(user_id: int) -> dict[bytes, Any]:
    client = get_redis()
    return {name: client.dump(name) for name in _user_keys(user_id)}


def _restore(user_id: int, saved: dict[bytes, Any]) -> None:
    """Put the user's keys back exactly as dumped (untimed setup of each mark-all)."""
    client = get_redis()
    pipe = client.pipeline(transaction=False)
    for name in _user_keys(user_id):
        pipe.delete(name)
    for name, value in saved.items():
        pipe.restore(name, 0, value, replace=True)
    pipe.execute()


def run(*, users: int, quick: bool) -> list[Row]:
    low, _high = data.ensure_users(users)
    User = get_user_model()
    operator, _ = User.objects.get_or_create(username="bench-operator", defaults={"is_staff": True})
    Announcement.objects.all().delete()
    data.reset_items()
    client = get_redis()
    client.flushdb()
    data.reset_baseline_table()
    size = incumbent_client.shapes(quick=quick)
    inbox_items, announcements = size.inbox_items, size.announcements
    counter = User.objects.get(pk=low + 1)  # unread counts: inbox items (30% read) and announcements
    marker = User.objects.get(pk=low + 2)  # mark-all-read: every item unread

    created = data.live_announcements(operator=operator, count=announcements)
    rng = random.Random(7)
    for a in rng.sample(created, announcements * 3 // 10):
        announcement_mark_read(user=counter, announcement_id=a.pk)
    # One build for both users when the sizes agree (they do in both modes): half the messages.
    both = inbox_items == size.mark_items
    refs = data.inbox_messages(
        operator=operator, audiences=[(inbox_items, [counter.pk, marker.pk] if both else [counter.pk])]
    )
    for i, ref in enumerate(refs):
        if i % 10 < 3:
            inbox_mark_read(user=counter, item_id=ref)

    unread = inbox_items - inbox_items * 3 // 10 + announcements - announcements * 3 // 10
    counts = inbox_counts(user=counter)
    assert counts["unread"] + counts["by_category"]["announcement"] == unread, counts

    incumbent = incumbent_client.results(users=users, quick=quick)
    source = incumbent_client.source(incumbent)
    rows: list[Row] = []

    # --- unread counts ------------------------------------------------------------------------
    # A poll takes the read cache's check and the announcement count: one round trip.
    theirs = incumbent["unread_count"]
    calls = 500 if quick else 2000
    inbox_counts(user=counter)
    with RoundTrips(client) as trips:
        for _ in range(10):
            inbox_counts(user=counter)
    ours = measure(lambda: inbox_counts(user=counter), repeat=calls, warmup=50)
    rows.append(
        Row.timed(
            "unread counts",
            f"{inbox_items:,} inbox items + {announcements:,} announcements, 30% read, polled again",
            ours,
            f"unread().count() ({source})",
            theirs,
            target=None,
            trips=trips.count / 10,
            max_trips=1,
            note="ours: inbox_counts (unread and unseen by category, announcements included): the read cache's "
            "check and the announcement count in one round trip; "
            + f"theirs: {theirs['items']:,} notifications of one user, {theirs['read']} read, index on "
            "(recipient, unread)",
        )
    )

    # --- mark-all-read of 10,000 unread ---------------------------------------------------------
    if not both:
        data.inbox_messages(operator=operator, audiences=[(size.mark_items, [marker.pk])])
    # Read once first, as the page that offers "mark all read" does: the
    # fan-out's arrivals are placed by that read, not by the mark measured.
    assert inbox_counts(user=marker)["unread"] == size.mark_items
    saved = _dump(marker.pk)
    marked: list[int] = []
    with RoundTrips(client) as trips:
        marked.append(inbox_mark_all_read(user=marker))
    mark_trips = trips.count
    ours = measure(
        lambda: marked.append(inbox_mark_all_read(user=marker)),
        repeat=5 if quick else 20,
        warmup=2,
        setup=lambda: _restore(marker.pk, saved),
    )
    assert set(marked) == {size.mark_items}, set(marked)
    theirs = incumbent["mark_all_read"]
    rows.append(
        Row.timed(
            "mark-all-read",
            f"{size.mark_items:,} unread items",
            ours,
            f"mark_all_as_read() ({source})",
            theirs,
            target=20,
            trips=mark_trips,
            max_trips=1,
            note=f"ours: inbox_mark_all_read, the user's keys restored (DUMP/RESTORE) before each untimed; "
            f"theirs: UPDATE of {theirs['items']:,} rows, set unread again before each",
        )
    )

    # --- read state on the inbox side ------------------------------------------------------------
    months = [m.decode() for m in client.smembers(mc_keys.inbox_months(counter.pk))]
    read_bytes = sum(client.memory_usage(mc_keys.read_bitmap(counter.pk, m), samples=0) or 0 for m in months)
    ever_bytes = sum(client.memory_usage(mc_keys.read_ever_bitmap(counter.pk, m), samples=0) or 0 for m in months)
    per_item = read_bytes / inbox_items
    month_items = sum(
        ItemSlotMonth.objects.filter(month__in=[int(m) for m in months]).values_list("next_offset", flat=True)
    )
    rows.append(
        Row(
            "memory",
            "inbox read state bytes per (user, item)",
            per_item,
            "B",
            f"notification row ({source})",
            float(incumbent["bytes_per_row"]),
            target=500,
            at_most=0.25,
            note=f"read bitmap(s) of a user with {inbox_items:,} items over {len(months)} month(s): {read_bytes:,} B "
            f"({per_item * 8:.2f} bits each; offsets are dense per month over every item of the month, "
            f"{month_items:,} so far here; the ever-read bitmap for first-read insight adds {ever_bytes:,} B); "
            f"theirs: pg_total_relation_size / rows over {incumbent['rows']:,} rows with its "
            f"{incumbent['indexes']} indexes",
        )
    )
    return rows
