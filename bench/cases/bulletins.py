"""Read cost against the number of live bulletins: 10 / 1,000 / 10,000.

For each count, ``READERS`` users (cold: their own keys, one read each) read
the first page of their inbox (``readmodel.inbox.inbox_page``, 20 rows with
the counts, no read cache): once settled (steady), and once as their first
read after one more bulletin was published (every user must merge it). The
live bulletins target 20 groups, each user is in one of them (so a user
shows 1/20 of them); the published one is for everyone.

Target: the first read after a publish at 10,000 live within 1.5x of the
same at 10 live (the merge takes in what changed, not every live bulletin).
Only Redis is involved: bulletins go in through ``readmodel.publish`` (the
projection's own call) without PostgreSQL rows.
"""

import time

from django.utils import timezone

from bench.harness import Row, Stats
from core.redis import keyspace_flush
from messagecenter.readmodel import inbox, publish, to_ms
from messagecenter.readmodel.entries import InboxEntry

READERS = 200
GROUPS = 20
PAGE = 20
MONTH = 202611
USER_BASE = 5_000_000  # ids of no bench user: the case builds its readers' keys itself
TARGET_RATIO = 1 / 1.5  # ours (10 live) over ours (10,000 live): at least this


def _put(bulletin_id: int, *, now_ms: int, groups: list[int], display_ms: int) -> None:
    entry = InboxEntry(ref=f"b{bulletin_id}", category="system", month=MONTH, offset=bulletin_id, score=display_ms)
    detail = {"id": entry.ref, "kind": "bulletin", "category": "system", "title": f"Bulletin {bulletin_id}"}
    detail |= {"summary": "", "body": "<p>x</p>", "member": entry.member}
    publish.bulletin_put(
        bulletin_id=bulletin_id, entry=entry, detail=detail, group_ids=groups, now_ms=now_ms, edit=False
    )


def _read(user_id: int) -> None:
    inbox.inbox_page(
        user_id=user_id,
        now_ms=to_ms(timezone.now()),
        category=None,
        max_score=None,
        skip=0,
        limit=PAGE,
        unread_only=False,
        since_ms=None,
    )


def _timed_reads(readers: list[int]) -> Stats:
    samples = []
    for user_id in readers:
        start = time.perf_counter()
        _read(user_id)
        samples.append(time.perf_counter() - start)
    return Stats(samples)


def _measure(live: int, readers: list[int], rounds: int) -> tuple[Stats, Stats]:
    """(steady reads, first reads after a publish)."""
    keyspace_flush()
    now_ms = to_ms(timezone.now())
    for bulletin_id in range(1, live + 1):
        _put(bulletin_id, now_ms=now_ms, groups=[1 + bulletin_id % GROUPS], display_ms=now_ms - 60_000)
    publish.user_groups_replace(
        groups_by_user={user_id: [1 + i % GROUPS] for i, user_id in enumerate(readers)}, now_ms=now_ms
    )
    for user_id in readers:  # each user's first read ever merges its groups' bulletins (untimed)
        _read(user_id)
    steady, first = Stats([]), Stats([])
    for extra in range(1, rounds + 1):
        steady.samples += _timed_reads(readers).samples
        # One more bulletin, for everyone: each reader's next read is their first after it.
        now_ms = to_ms(timezone.now())
        _put(live + extra, now_ms=now_ms, groups=[], display_ms=now_ms - 1)
        first.samples += _timed_reads(readers).samples
    return steady, first


def run(*, users: int, quick: bool) -> list[Row]:
    counts = (10, 1_000, 10_000)
    readers = [USER_BASE + i for i in range(READERS)]
    rounds = 3 if quick else 10
    _measure(counts[0], readers, 1)  # warm-up: code paths, script cache, connections
    rows: list[Row] = []
    base: Stats | None = None
    for live in counts:
        steady, first = _measure(live, readers, rounds)
        base = base or first
        shape = f"{live:,} live bulletins (1/{GROUPS} each user's), {len(readers)} users x {rounds} publishes"
        rows.append(
            Row(
                "bulletin merge",
                f"steady read, {shape}",
                steady.median,
                "s",
                "",
                None,
                p99=steady.p99,
                note="ours: inbox_page (20 rows and counts, no read cache) of a settled user: the one-round-trip path"
                if live == counts[-1]
                else "",
            )
        )
        rows.append(
            Row(
                "bulletin merge",
                f"first read after a publish, {shape}",
                first.median,
                "s",
                f"the same at {counts[0]} live",
                base.median,
                p99=first.p99,
                baseline_p99=base.p99,
                target=TARGET_RATIO if live == counts[-1] else None,
                note="target: within 1.5x of the same at 10 live" if live == counts[-1] else "",
            )
        )
    keyspace_flush()
    return rows
