"""First reads of inbox items per hour (the admin's read-rate chart).

The inbox script reports the user's first reads: a read bit going 0 -> 1
while the user's ever-read bit (``keys.mc_read_ever_bitmap``, never cleared)
was 0 too (op ``read`` returns 2, op ``read_all`` lists the refs). Only those
are counted, so marking an item read, unread and read again, or repeating
"read all", counts a user once.
The counters are global keys (one hash per item), so they are written here, in
one pipeline after the script, never inside the per-user script (it runs on
the user's Redis Cluster slot). The same pipeline notes the changed months in
the read-state snapshot job's dirty set (a global key too).
"""

import logging
from collections.abc import Iterable
from datetime import datetime

from redis.exceptions import RedisError

from core import keys
from core.insight import READ_HOURS_TTL_SECONDS, hour_of, hours_from_hashes
from core.redis import get_redis
from messagecenter.readmodel.snapshots import dirty_members

logger = logging.getLogger(__name__)


def record_reads(*, user_id: int, months: Iterable[int | str], first_refs: Iterable[str], now_ms: int) -> None:
    """After the script changed read bits: note the user's changed months for the
    read-state snapshot job and add one first read in the current hour to each
    of ``first_refs``, in one round trip (nothing when both are empty).

    The read itself has happened: a failure here loses a statistic and at most
    one snapshot interval of durability, never the user's request.
    """
    refs = list(first_refs)
    dirty = dirty_members(user_id=user_id, months=months)
    if not refs and not dirty:
        return
    hour = hour_of(now_ms)
    pipe = get_redis().pipeline(transaction=False)
    if dirty:
        pipe.sadd(keys.mc_snapshot_dirty(), *dirty)
    for ref in refs:
        key = keys.mc_item_read_hours(ref)
        pipe.hincrby(key, str(hour), 1)
        pipe.expire(key, READ_HOURS_TTL_SECONDS)
    try:
        pipe.execute()
    except RedisError:
        logger.warning("read notes not recorded for user %s (%d first read(s))", user_id, len(refs), exc_info=True)


def read_hours(*, ref: str) -> dict[datetime, int]:
    """First reads of the item per hour, oldest first."""
    return hours_from_hashes([get_redis().hgetall(keys.mc_item_read_hours(ref))])
