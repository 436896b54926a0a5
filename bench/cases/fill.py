"""The first read of a user whose part of the read model is not in Redis.

After a loss (or for a user Redis never held) the user's first read fills
their part from PostgreSQL (``messagecenter.fill``) and then reads it. Users
with 10, 1,000 and 10,000 push messages in their inbox, several of each,
each emptied before its read (a cold cache, as after a FLUSHALL); next to it,
the same user's next read (warm) in the same run. Targets: the first read's
p99 at most 5 / 25 / 150 ms.
"""

from typing import Any

from django.contrib.auth import get_user_model

from bench.data import inbox_messages, reset_items
from bench.harness import Row, Stats
from core.redis import get_redis
from messagecenter.fill import inbox_fill
from messagecenter.readmodel.user_part import user_part_drop
from messagecenter.selectors import inbox_list

SIZES = ((10, 5.0e-3), (1_000, 25e-3), (10_000, 150e-3))
USERS_PER_SIZE = 4


def _first_read(user: Any) -> tuple[float, float]:
    """(seconds of the fill and first page, seconds of the next page) for a user emptied first."""
    import time

    user_part_drop(user_id=int(user.pk), group_keys=())
    started = time.perf_counter()
    assert inbox_fill(user_id=int(user.pk))
    inbox_list(user=user, limit=20)
    first = time.perf_counter() - started
    started = time.perf_counter()
    inbox_list(user=user, limit=20)
    return first, time.perf_counter() - started


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
    return rows
