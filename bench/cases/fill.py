"""The first read of a user whose part of the read model is not in Redis.

After a loss (or for a user Redis never held) the user's first read fills
their part from PostgreSQL (``messagecenter.fill``) and then reads it. Users
with 10, 1,000 and 10,000 push messages in their inbox, several of each,
each emptied before its read (a cold cache, as after a FLUSHALL); next to it,
the same user's next read (warm) in the same run. Targets: the first read's
p99 at most 5 / 25 / 150 ms, and no Redis call of a fill over 5 ms (the
slowest of the 10,000-item fills' fill_items.lua calls, each timed).
"""

import time
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from bench.data import inbox_messages, reset_items
from bench.harness import Row, Stats
from core.redis import get_redis
from messagecenter.fill import inbox_fill
from messagecenter.readmodel import to_ms
from messagecenter.readmodel.publish import fill_item_calls
from messagecenter.readmodel.user_part import user_part_drop
from messagecenter.selectors import inbox_list
from messagecenter.user_rows import user_items

SIZES = ((10, 5.0e-3), (1_000, 25e-3), (10_000, 150e-3))
USERS_PER_SIZE = 4


def _first_read(user: Any) -> tuple[float, float]:
    """(seconds of the fill and first page, seconds of the next page) for a user emptied first."""
    user_part_drop(user_id=int(user.pk), group_keys=())
    started = time.perf_counter()
    assert inbox_fill(user_id=int(user.pk))
    inbox_list(user=user, limit=20)
    first = time.perf_counter() - started
    started = time.perf_counter()
    inbox_list(user=user, limit=20)
    return first, time.perf_counter() - started


def _fill_calls_timed(user: Any) -> list[float]:
    """Seconds of each fill_items.lua call putting the user's items back into a
    part just dropped, timed from Python (the round trip included). Without the
    read state restored first every item lands unread: the most work a call
    does. The user is then filled again as a read would."""
    user_id, now = int(user.pk), timezone.now()
    items = user_items(user_id, now=now, want=int(settings.MESSAGECENTER_INBOX_MAX_ITEMS))
    entries = sorted((e for e, _type in items.entries if not e.group_key), key=lambda e: (e.score, e.ref))
    user_part_drop(user_id=user_id, group_keys=())
    seconds = []
    for call in fill_item_calls(user_id=user_id, entries=entries, now_ms=to_ms(now)):
        started = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - started)
    user_part_drop(user_id=user_id, group_keys=())
    assert inbox_fill(user_id=user_id)
    return seconds


def _evalsha_histogram() -> tuple[int, dict[int, int]]:
    """Redis's own latency histogram of EVALSHA (server-wide, kept since it
    started): the calls, and per bucket (its upper bound, µs) the calls that
    took at most that long."""
    reply = get_redis().execute_command("LATENCY", "HISTOGRAM", "evalsha").get(b"evalsha", {})
    return int(reply.get(b"calls", 0)), {int(k): int(v) for k, v in reply.get(b"histogram_usec", {}).items()}


def _slowest_bound(before: tuple[int, dict[int, int]], after: tuple[int, dict[int, int]]) -> float:
    """Seconds no call between the two histograms took longer than: the smallest
    bucket holding all of them (buckets double: 1.06, 2.11, 4.23, 8.45 ms, ...)."""
    calls = after[0] - before[0]
    for bound in sorted(after[1]):
        if after[1][bound] - before[1].get(bound, 0) >= calls:
            return bound / 1e6
    return float("inf")


def run(*, users: int, quick: bool) -> list[Row]:
    User = get_user_model()
    get_redis().flushdb()
    reset_items()
    operator, _ = User.objects.get_or_create(username="bench-fill-operator")
    pool = [User.objects.get_or_create(username=f"bench-fill-{i}")[0] for i in range(USERS_PER_SIZE * len(SIZES))]
    # Each size's users get their own messages, the largest inboxes' newest.
    audiences = [
        (size, [int(u.pk) for u in pool[i * USERS_PER_SIZE : (i + 1) * USERS_PER_SIZE]])
        for i, (size, _target) in enumerate(SIZES)
    ]
    inbox_messages(operator=operator, audiences=list(reversed(audiences)))
    rows = []
    rounds = 2 if quick else 5
    for i, (size, target) in enumerate(SIZES):
        readers = pool[i * USERS_PER_SIZE : (i + 1) * USERS_PER_SIZE]
        firsts, warms = [], []
        # One first read untimed: the process's own first use of the path (the
        # scripts' loading, the statement's first planning) is paid once per
        # process, not by each user whose part is missing.
        _first_read(readers[0])
        for _ in range(rounds):
            for reader in readers:
                first, warm = _first_read(reader)
                firsts.append(first)
                warms.append(warm)
        cold, hot = Stats(firsts), Stats(warms)
        rows.append(
            Row(
                "first read",
                f"a user's first page with their part not in Redis ({size:,} items): fill from PostgreSQL, then read",
                cold.median,
                "s",
                "the same user's next page (filled, same run)",
                hot.median,
                p99=cold.p99,
                baseline_p99=hot.p99,
                at_most=target,
                ceiling_on_p99=True,
                note=f"{len(readers)} users x {rounds} rounds, each emptied before its read (after one untimed)",
            )
        )
    largest = pool[-USERS_PER_SIZE:]
    before = _evalsha_histogram()
    calls = [s for _ in range(rounds) for reader in largest for s in _fill_calls_timed(reader)]
    slowest = _slowest_bound(before, _evalsha_histogram())
    rows.append(
        Row(
            "first read",
            f"the slowest Redis call of a {SIZES[-1][0]:,}-item fill (fill_items.lua), as Redis timed it",
            slowest,
            "s",
            "the median call, timed from Python (round trip included)",
            Stats(calls).median,
            at_most=5e-3,
            note=(
                f"{len(calls)} calls: {len(largest)} users x {rounds} fills, every item unread (the most work a call"
                " does); Redis's LATENCY HISTOGRAM of EVALSHA before and after (server-wide, the bench runs alone),"
                " so the figure is the upper bound of the bucket holding the slowest call; timed from Python the"
                f" slowest took {max(calls) * 1e3:.2f} ms"
            ),
        )
    )
    return rows
