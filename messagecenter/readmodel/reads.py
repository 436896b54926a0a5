"""First reads of inbox items per hour (the admin's read-rate chart).

The inbox script reports the user's first reads: a read bit going 0 -> 1
while the user's ever-read bit (``keys.mc_read_ever_bitmap``, never cleared)
was 0 too (op ``read`` returns 2, op ``read_all`` lists the refs). Only those
are counted, so marking an item read, unread and read again, or repeating
"read all", counts a user once.
The counters are global keys (one hash per item), so they are written here, in
one pipeline after the script, never inside the per-user script (it runs on
the user's Redis Cluster slot).
"""

import logging
from collections.abc import Iterable
from datetime import datetime

from redis.exceptions import RedisError

from core import keys
from core.insight import READ_HOURS_TTL_SECONDS, hour_of, hours_from_hashes
from core.redis import get_redis

logger = logging.getLogger(__name__)


def record_first_reads(*, refs: Iterable[str], now_ms: int) -> None:
    """Add one first read in the current hour to each ref (one round trip; nothing when empty).

    The read itself has happened: a failure here loses a statistic, never the
    user's request.
    """
    refs = list(refs)
    if not refs:
        return
    hour = hour_of(now_ms)
    pipe = get_redis().pipeline(transaction=False)
    for ref in refs:
        key = keys.mc_item_read_hours(ref)
        pipe.hincrby(key, str(hour), 1)
        pipe.expire(key, READ_HOURS_TTL_SECONDS)
    try:
        pipe.execute()
    except RedisError:
        logger.warning("first-read counters not updated for %d item(s)", len(refs), exc_info=True)


def read_hours(*, ref: str) -> dict[datetime, int]:
    """First reads of the item per hour, oldest first."""
    return hours_from_hashes([get_redis().hgetall(keys.mc_item_read_hours(ref))])
