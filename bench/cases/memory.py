"""Bytes per user when a month holds 1,000,000 items: users with 5, 1,000 and
10,000 of them (spread over the month), and a dense user's read state per
(user, item).

Each user gets its items through the read model (deliver.lua), reads a page
and the counts (the read cache), and marks everything read (read and
ever-read bit-sets then hold every item: the biggest state). "Ours" is
MEMORY USAGE over every key of the user's hash tag; "before" is the same
keys with the push, read and ever-read bit-sets written as the month-wide
bitmaps they were before (SETBIT at the same offsets into scratch keys,
measured the same way). Self-contained: no PostgreSQL rows beyond the users.
"""

import random
from typing import Any

from bench import data
from bench.harness import Row
from core import keys
from core.redis import get_redis
from messagecenter import keys as mc_keys
from messagecenter.readmodel import InboxEntry, inbox, publish

MONTH = 202611
MONTH_ITEMS = 1_000_000
START_MS = 1_790_000_000_000
NOW_MS = START_MS + 2 * MONTH_ITEMS
FIVE_ITEMS_CEILING = 4 * 1024


def _bit_keys(user_id: int) -> tuple[str, str, str]:
    return (
        mc_keys.push_bitmap(user_id, MONTH),
        mc_keys.read_bitmap(user_id, MONTH),
        mc_keys.read_ever_bitmap(user_id, MONTH),
    )


def _fill(user_id: int, offsets: list[int]) -> None:
    """The user's items at these offsets, delivered, shown, counted and all read."""
    for i, offset in enumerate(offsets):
        entry = InboxEntry(
            ref=f"m{user_id}x{i}", category="system", month=MONTH, offset=offset, score=START_MS + offset, expire_ms=0
        )
        publish.inbox_deliver(entry=entry, user_ids=[user_id], now_ms=START_MS)
    data.first_page(user_id, now_ms=NOW_MS)
    inbox.inbox_counts(user_id=user_id, now_ms=NOW_MS)
    inbox.inbox_read_all(user_id=user_id, category=None, now_ms=NOW_MS)
    inbox.inbox_counts(user_id=user_id, now_ms=NOW_MS)


def _sizes(user_id: int) -> dict[str, int]:
    client = get_redis()
    return {name.decode(): int(client.memory_usage(name, samples=0) or 0) for name in data.user_redis_keys(user_id)}


def _month_bitmaps_bytes(user_id: int, offsets: list[int]) -> int:
    """What the three bit-sets cost as month-wide bitmaps, built the way the
    layout before built them: push by SETBIT as items arrived, read and
    ever-read by "read all" (BITOP OR of the push bitmap)."""
    client = get_redis()
    push, read, ever = (f"{keys.prefix()}bench:before:{n}:{keys.user_tag(user_id)}" for n in ("push", "read", "ever"))
    pipe = client.pipeline(transaction=False)
    pipe.delete(push, read, ever)
    for offset in offsets:
        pipe.setbit(push, offset, 1)
    pipe.bitop("OR", read, read, push)
    pipe.bitop("OR", ever, ever, push)
    pipe.execute()
    total = sum(int(client.memory_usage(name, samples=0) or 0) for name in (push, read, ever))
    client.delete(push, read, ever)
    return total


def _user_row(user_id: int, count: int, rng: random.Random) -> tuple[Row, dict[str, Any]]:
    # Spread over the month; the last item is the month's millionth.
    offsets = [*sorted(rng.sample(range(MONTH_ITEMS - 1), count - 1)), MONTH_ITEMS - 1]
    _fill(user_id, offsets)
    sizes = _sizes(user_id)
    bit_names = _bit_keys(user_id)
    bit_bytes = sum(sizes.get(name, 0) for name in bit_names)
    other = sum(sizes.values()) - bit_bytes
    before = other + _month_bitmaps_bytes(user_id, offsets)
    client = get_redis()
    forms = "/".join(client.type(name).decode() for name in bit_names)
    ours = float(sum(sizes.values()))
    row = Row(
        "memory",
        f"bytes per user at {MONTH_ITEMS:,} items/month: a user with {count:,} items",
        ours,
        "B",
        "before: month-wide bitmaps",
        float(before),
        at_most=FIVE_ITEMS_CEILING if count == 5 else None,
        note=f"{len(sizes)} keys; push/read/ever-read bit-sets {bit_bytes:,} B as {forms}, "
        f"the other keys {other:,} B (zsets, counters, state, months, read cache, live version...)",
    )
    return row, sizes


def _dense_row(user_id: int, count: int) -> Row:
    """A user holding every item of a month (offsets 0..count-1), all read."""
    offsets = list(range(count))
    _fill(user_id, offsets)
    client = get_redis()
    read_key = mc_keys.read_bitmap(user_id, MONTH)
    ours = int(client.memory_usage(read_key, samples=0) or 0)
    before = _month_bitmaps_bytes(user_id, offsets) / 3
    return Row(
        "memory",
        "read state bytes per (user, item), dense month",
        ours / count,
        "B",
        "before: month-wide bitmaps",
        before / count,
        at_most=0.25,
        note=f"read bit-set of a user with all {count:,} items of a month ({client.type(read_key).decode()}, "
        f"{ours:,} B); the ever-read one costs the same again",
    )


def run(*, users: int, quick: bool) -> list[Row]:
    low, _high = data.ensure_users(4)
    rng = random.Random(17)
    rows: list[Row] = []
    five_sizes: dict[str, int] = {}
    for i, count in enumerate((5, 1_000, 10_000)):
        row, sizes = _user_row(low + i, count, rng)
        rows.append(row)
        if count == 5:
            five_sizes = sizes
    rows[0].note += "; per key: " + ", ".join(
        f"{name.split(':', 1)[-1]} {size} B" for name, size in sorted(five_sizes.items())
    )
    rows.append(_dense_row(low + 3, 2_000 if quick else 10_000))
    return rows
