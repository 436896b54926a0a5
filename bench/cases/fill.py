"""The first read of a user whose part of the read model is not in Redis.

After a loss (or for a user Redis never held) the user's first read fills
their part from PostgreSQL (``messagecenter.fill``) and then reads it. Users
with 10, 1,000 and 10,000 push messages in their inbox, several of each,
each emptied before its read (a cold cache, as after a FLUSHALL); next to it,
the same user's next read (warm) in the same run. Targets: the first read's
p99 at most 5 / 25 / 150 ms, and no Redis call of a fill over 5 ms (the
slowest of the 10,000-item fills' fill_items.lua calls, each timed by the
slow log of a redis-server of this run). And the same users' first page
served from PostgreSQL alone (``messagecenter.fallback``, as while Redis is
down), which reads what a fill reads: its p99 within the first read's target.
"""

import time
from typing import Any

import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from bench.data import inbox_messages, reset_items
from bench.harness import Row, Stats
from bench.scale import _free_port, private_redis
from core.redis import get_redis
from messagecenter import fallback
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


def _fill_calls(user: Any) -> list[Any]:
    """The fill_items.lua calls that put the user's items into a part of their
    own: without the read state restored first every item lands unread, the
    most work a call does."""
    user_id, now = int(user.pk), timezone.now()
    items = user_items(user_id, now=now, want=int(settings.MESSAGECENTER_INBOX_MAX_ITEMS))
    entries = sorted((e for e, _type in items.entries if not e.group_key), key=lambda e: (e.score, e.ref))
    return list(fill_item_calls(user_id=user_id, entries=entries, now_ms=to_ms(now)))


def _calls_timed(fills: list[list[Any]]) -> tuple[list[float], list[float]]:
    """Each fill's calls, one fill after the other, on a redis-server of this
    run (a spare port, stopped by its PID) whose slow log keeps every command:
    (seconds of each call as Redis's slow log timed it, seconds of each timed
    from Python, the round trip included). The log times only the command's
    own run, not the server's housekeeping between commands, which on the
    shared Redis (other databases' expiry, rehashing) lands on whichever call
    it follows."""
    durations, seconds = [], []
    with private_redis(_free_port(6394)) as (url, _pid):
        client = redis.Redis.from_url(url)
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 100_000)
        for calls in fills:
            client.flushdb()
            client.slowlog_reset()
            for call in calls:
                started = time.perf_counter()
                call(client)
                seconds.append(time.perf_counter() - started)
            logged = client.slowlog_get(100_000)
            durations += [int(e["duration"]) / 1e6 for e in logged if bytes(e["command"]).startswith(b"EVALSHA")]
        client.close()
    return durations, seconds


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
        rows.append(
            _page_row(
                f"a user's first page with their part not in Redis ({size:,} items): fill from PostgreSQL, then read",
                "the same user's next page (filled, same run)",
                (Stats(firsts), Stats(warms)),
                target,
                f"{len(readers)} users x {rounds} rounds, each emptied before its read (after one untimed)",
            )
        )
    rows += _fallback_rows(pool, rounds)
    largest = pool[-USERS_PER_SIZE:]
    durations, calls = _calls_timed([_fill_calls(reader) for _ in range(rounds) for reader in largest])
    rows.append(
        Row(
            "first read",
            f"the slowest Redis call of a {SIZES[-1][0]:,}-item fill (fill_items.lua), as Redis's slow log timed it",
            max(durations),
            "s",
            "the median call, timed from Python (round trip included)",
            Stats(calls).median,
            p99=Stats(durations).p99,
            at_most=5e-3,
            note=(
                f"{len(durations)} calls: {len(largest)} users x {rounds} fills, every item unread (the most work a"
                " call does), each fill into an empty part on a redis-server of this run whose slow log keeps every"
                " command (its own run, not the housekeeping between commands); timed from Python the slowest took"
                f" {max(calls) * 1e3:.2f} ms"
            ),
        )
    )
    return rows


def _fallback_page(user: Any) -> tuple[float, int]:
    """(seconds, rows) of the user's first page computed from PostgreSQL alone."""
    started = time.perf_counter()
    page = fallback.inbox_page(
        user_id=int(user.pk),
        now=timezone.now(),
        category=None,
        max_score=None,
        skip=0,
        limit=20,
        unread_only=False,
        since_ms=None,
    )
    return time.perf_counter() - started, len(page.rows)


def _fallback_rows(pool: list[Any], rounds: int) -> list[Row]:
    rows = []
    for i, (size, target) in enumerate(SIZES):
        readers = pool[i * USERS_PER_SIZE : (i + 1) * USERS_PER_SIZE]
        _fallback_page(readers[0])
        seconds, shown, warms = [], set(), []
        for _ in range(rounds):
            for reader in readers:
                took, count = _fallback_page(reader)
                seconds.append(took)
                shown.add(count)
                started = time.perf_counter()
                inbox_list(user=reader, limit=20)
                warms.append(time.perf_counter() - started)
        rows.append(
            _page_row(
                f"a user's first page from PostgreSQL alone, as while Redis is down ({size:,} items)",
                "the same user's page from Redis (filled, same run)",
                (Stats(seconds), Stats(warms)),
                target,
                f"{len(readers)} users x {rounds} rounds; rows on a page: {sorted(shown)} ({min(size, 20)} expected);"
                " the largest inboxes' messages are the newest of all, so the smaller ones' lie deep in the tables",
            )
        )
    return rows


def _page_row(measure: str, baseline: str, timed: tuple[Stats, Stats], target: float, note: str) -> Row:
    """A page's row: ``timed`` is (the measured pages, the baseline's), the target on the p99."""
    cold, hot = timed
    return Row(
        "first read",
        measure,
        cold.median,
        "s",
        baseline,
        hot.median,
        p99=cold.p99,
        baseline_p99=hot.p99,
        at_most=target,
        ceiling_on_p99=True,
        note=note,
    )
