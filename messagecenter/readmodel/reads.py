"""First reads of inbox items per hour (the admin's read-rate chart).

The inbox script reports the user's first reads: a read bit going 0 -> 1
while the user's ever-read bit (``mc_keys.read_ever_bitmap``, never cleared)
was 0 too (op ``read`` returns 2, op ``read_all`` lists the refs, or hands
back per month the bitmap of the offsets first read, or for a month kept
as a set, ``#<month>`` and the offsets joined by ","). Only those
are counted, so marking an item read, unread and read again, or repeating
"read all", counts a user once.
The counters are global keys (one hash per item), so they are written here, in
one pipeline after the script, never inside the per-user script (it runs on
the user's Redis Cluster slot).
"""

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime

from redis.exceptions import RedisError

from core.redis import get_redis
from insight.reports import READ_HOURS_TTL_SECONDS, hour_of, hours_from_hashes
from messagecenter import keys as mc_keys
from messagecenter.readmodel import bits

logger = logging.getLogger(__name__)


def record_reads(
    *,
    user_id: int,
    first_refs: Iterable[str],
    now_ms: int,
    first_maps: Mapping[str, bytes] | None = None,
) -> None:
    """After the script changed read bits: add one first read in the current hour
    to each of ``first_refs`` and of the items whose offsets ``first_maps``
    (month -> bitmap) holds, in one round trip (nothing when all are empty).

    The read itself has happened: a failure here loses a statistic, never the
    user's request.
    """
    refs = list(first_refs)
    maps = {month: bitmap for month, bitmap in (first_maps or {}).items() if bitmap}
    if not refs and not maps:
        return
    hour = hour_of(now_ms)
    pipe = get_redis().pipeline(transaction=False)
    if refs:
        # Write-behind: one list entry whatever the number of items (the hour
        # hashes are global keys, one per item: two commands each would make a
        # "read all" of 10,000 items cost 20,000 commands).
        pipe.rpush(mc_keys.first_reads_pending(), first_reads_note(hour=hour, refs=refs))
    for month, bitmap in maps.items():
        pipe.rpush(mc_keys.first_reads_pending(), f"{hour}|@{month}|".encode() + bitmap)
    try:
        pipe.execute()
    except RedisError:
        logger.warning("read notes not recorded for user %s (%d first read(s))", user_id, len(refs), exc_info=True)


def first_reads_note(*, hour: int, refs: Iterable[str]) -> str:
    """The pending list's entry of these items' first reads in ``hour``."""
    return f"{hour}|{','.join(refs)}"


def bitmap_offsets(bitmap: bytes) -> list[int]:
    """The offsets of a Redis bitmap's set bits (offset 0 is the first byte's highest bit)."""
    offsets: list[int] = []
    for index, byte in enumerate(bitmap):
        if byte:
            offsets.extend(index * 8 + bit for bit in range(8) if byte & (0x80 >> bit))
    return offsets


FOLD_BATCH = 500

# (month, offsets) -> refs of the items at those slots: bitmap entries name
# items by slot; PostgreSQL knows which item holds each (messagecenter.items).
SlotResolver = Callable[[int, list[int]], list[str]]


def first_reads_fold(
    *, resolve: SlotResolver, max_entries: int = 100_000, on_batch: Callable[[dict[str, int]], None] | None = None
) -> int:
    """Add the pending first reads to the per-item hour hashes; returns entries folded.

    Each entry is popped by exactly one folder (LPOP), so concurrent folds never
    count twice; a folder dying between its pop and its write loses those
    counts (a statistic, never a read mark).
    """
    client = get_redis()
    folded = 0
    while folded < max_entries:
        entries = client.lpop(mc_keys.first_reads_pending(), FOLD_BATCH)
        if not entries:
            break
        counts: Counter[tuple[str, str]] = Counter()
        for entry in entries:
            hour_raw, _, rest = entry.partition(b"|")
            hour = hour_raw.decode()
            if rest.startswith(b"@"):  # <hour>|@<month>|<bitmap> or <hour>|@#<month>|<offset>,...
                month, _, bitmap = rest[1:].partition(b"|")
                if month.startswith(b"#"):  # a sparse month's offsets (read_all.lua)
                    month, offsets = month[1:], [int(o) for o in bitmap.split(b",") if o]
                else:
                    offsets = bitmap_offsets(bitmap)
                for ref in resolve(int(month), offsets):
                    counts[(ref, hour)] += 1
                continue
            for ref in rest.decode().split(","):
                if ref:
                    counts[(ref, hour)] += 1
        pipe = client.pipeline(transaction=False)
        for (ref, hour), count in counts.items():
            key = mc_keys.item_read_hours(ref)
            pipe.hincrby(key, hour, count)
            pipe.expire(key, READ_HOURS_TTL_SECONDS)
        pipe.execute()
        folded += len(entries)
        if on_batch is not None:
            totals: Counter[str] = Counter()
            for (ref, _hour), count in counts.items():
                totals[ref] += count
            on_batch(dict(totals))
    return folded


def read_hours(*, ref: str) -> dict[datetime, int]:
    """First reads of the item per hour, oldest first (fold the pending ones first)."""
    return hours_from_hashes([get_redis().hgetall(mc_keys.item_read_hours(ref))])


def read_totals(*, refs: Iterable[str]) -> dict[str, int]:
    """First reads of each item over all hours (the sum of its hour hash), one round trip."""
    wanted = list(refs)
    if not wanted:
        return {}
    pipe = get_redis().pipeline(transaction=False)
    for ref in wanted:
        pipe.hvals(mc_keys.item_read_hours(ref))
    return {ref: sum(int(count) for count in counts) for ref, counts in zip(wanted, pipe.execute(), strict=True)}


def read_ever_bits(*, month: int, offset: int, user_ids: Sequence[int]) -> list[bool]:
    """Whether each user has ever read the item at (``month``, ``offset``): one
    pipelined look at their ever-read bit-sets, whatever their form. The same
    bits whose 0 -> 1 transitions the hour counters count, so "has read" here
    and the read count never disagree (bar first reads not folded yet)."""
    return bits.has_many((mc_keys.read_ever_bitmap(user_id, month) for user_id in user_ids), offset)
