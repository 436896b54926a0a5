"""Announcements at any count and any user id: the cost of a list page and of
the counts at 10 and at 10,000 live announcements, and the bytes of read state
per (user, announcement) with readers up to id 10^9.

Self-contained: public services and selectors only, so the same file measures
any version of the read model.
"""

import random
import re
import statistics
import time
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.utils import timezone

from accounts.services import user_set_platforms
from bench import data
from bench.harness import Row
from core.local_cache import local_caches_clear
from core.redis import get_redis
from notices import readmodel
from notices.models import Announcement, AnnouncementPlatform
from notices.selectors import announcement_counts, announcement_list
from notices.services import announcement_mark_read

PLATFORM = "user"
# Read bitmaps (notice:{p}:<id>) and per-user counter blocks (notice:{p}:reads:<b>).
_READ_STATE_KEY = re.compile(r"notice:\{[^}]*\}:(\d+|reads:\d+)$")
READERS = 40  # users rotated through, each measured cold (first count after a mark, first page)
# The page size at both counts: a page the 10 live fill, so both sizes read
# and render as many rows and the ratio is the cost of the live count alone.
PAGE = 10


def _publish(count: int) -> list[Announcement]:
    Announcement.objects.all().delete()
    now = timezone.now()
    created = Announcement.objects.bulk_create(
        Announcement(title=f"S{i}", body_html="<p>x</p>", summary="x", publish_at=now - timedelta(seconds=i + 1))
        for i in range(count)
    )
    AnnouncementPlatform.objects.bulk_create(AnnouncementPlatform(announcement=a, platform=PLATFORM) for a in created)
    readmodel.platform_sync(platform=PLATFORM)
    return created


def _drop_notice_keys(prefix: str) -> None:
    """Delete every announcement key of the bench's Redis (one DEL each: a
    cluster refuses a DEL across slots) and this process's copies of them."""
    client = get_redis()
    for key in list(client.scan_iter(match=f"{prefix}notice:*", count=1000)):
        client.delete(key)
    local_caches_clear()


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def _costs(live: int, users: list[Any], rng: random.Random) -> tuple[float, float]:
    """(median list page ms, median count-after-a-mark ms) over the users, each cold."""
    created = _publish(live)
    for user in users:  # some read state already there
        for a in rng.sample(created, min(5, live)):
            announcement_mark_read(user=user, announcement_id=a.pk)
    pages: list[float] = []
    counts: list[float] = []
    for _ in range(3):
        for user in users:
            announcement_mark_read(user=user, announcement_id=rng.choice(created).pk)
            start = time.perf_counter()
            announcement_counts(user=user)
            counts.append(time.perf_counter() - start)
            start = time.perf_counter()
            announcement_list(user=user, limit=PAGE)
            pages.append(time.perf_counter() - start)
    return _median_ms(pages), _median_ms(counts)


def _read_state_bytes(prefix: str) -> tuple[int, int, str]:
    """(bytes of every read bitmap and counter, the largest such key's bytes, its name)."""
    client = get_redis()
    total, largest, name = 0, 0, ""
    for key in client.scan_iter(match=f"{prefix}notice:*", count=1000):
        text = key.decode()
        if not _READ_STATE_KEY.search(text):
            continue  # indexes, metas, hour counters: not per-user read state
        size = int(client.memory_usage(key, samples=0) or 0)
        total += size
        if size > largest:
            largest, name = size, text
    return total, largest, name


def run(*, users: int, quick: bool) -> list[Row]:
    from django.conf import settings

    low, _ = data.ensure_users(max(users, READERS))
    User = get_user_model()
    readers = list(User.objects.filter(pk__gte=low).order_by("pk")[:READERS])
    for user in readers:
        user_set_platforms(user=user, platforms=[PLATFORM])
    rng = random.Random(17)
    rows: list[Row] = []

    small_page, small_count = _costs(10, readers, rng)
    big = 2_000 if quick else 10_000
    big_page, big_count = _costs(big, readers, rng)
    for label, small, large in (
        (f"list page of {PAGE}", small_page, big_page),
        ("counts after a mark", small_count, big_count),
    ):
        ratio = large / small
        rows.append(
            Row(
                "announcements",
                f"{label} at 10 / {big:,} live ({READERS} users rotated, cold)",
                large / 1000,
                "s",
                "same at 10 live",
                small / 1000,
                target=1 / 1.5,
                note=f"{small:.2f} ms at 10, {large:.2f} ms at {big:,}: {ratio:.2f}x (target ≤ 1.5x) "
                f"{'met' if ratio <= 1.5 else 'missed'}",
            )
        )

    # Read state bytes: dense readers read every announcement, plus readers at high ids.
    prefix = str(settings.MESSAGECENTER_KEY_PREFIX)
    # Only this section's read state is measured: the cases before it leave
    # counter blocks and bitmaps of their own readers behind.
    _drop_notice_keys(prefix)
    announcements = 10
    created = _publish(announcements)
    dense = min(users, 2_000)  # 20,000 marks: every reader reads every announcement
    for user_id in range(low, low + dense):
        for a in created:
            readmodel.mark(platforms=[PLATFORM], user_id=user_id, announcement_id=a.pk, read=True)
    # A count moves each chunk's time past the new publishes: their readers' counters then exist.
    for user_id in range(low, low + dense, 1000):
        readmodel.read_count(platform=PLATFORM, user_id=user_id, now=timezone.now())
    dense_bytes, _, _ = _read_state_bytes(prefix)
    per_pair = dense_bytes / (dense * announcements)
    high_ids = [10**9, 10**9 - 12_345, 987_654_321, 500_000_001, 123_456_789]
    for user_id in high_ids:
        readmodel.mark(platforms=[PLATFORM], user_id=user_id, announcement_id=created[0].pk, read=True)
    all_bytes, largest, largest_name = _read_state_bytes(prefix)
    lone = (all_bytes - dense_bytes) / len(high_ids)
    rows.append(
        Row(
            "memory",
            f"announcement read state bytes per (user, announcement), {dense:,} readers x {announcements} read all",
            per_pair,
            "B",
            "2 bits",
            0.25,
            at_most=0.25,
            note=f"{per_pair * 8:.2f} bits each, bitmaps and per-user counters (MEMORY USAGE {dense_bytes:,} B)",
        )
    )
    rows.append(
        Row(
            "memory",
            "largest read-state key, readers up to id 10^9",
            float(largest),
            "B",
            "a few KB",
            8192.0,
            at_most=8192.0,
            note=f"{largest_name}; a lone high-id reader of one announcement adds {lone:,.0f} B",
        )
    )
    Announcement.objects.all().delete()
    return rows
