"""The hourly cap on pushes and e-mails per user: a counter per user and hour.

A counter is taken before a send (INCR, then EXPIRE so it lasts two hours),
a batch of users in one pipeline. A user whose count passes the cap gets
nothing more that hour; what would have gone waits for the digest. Keys of
many users in one pipeline: not a script, so each command finds its own slot
on Redis Cluster. Losing the counters (Redis restarted) starts the hour anew,
at most one more hour's worth of sends: a cap, not a record.
"""

from collections.abc import Sequence

from core.redis import get_redis
from messagecenter import keys as mc_keys

_COUNTER_SECONDS = 2 * 60 * 60
# Users per round trip (two commands each): a batch of thousands stays in calls of about a millisecond.
_PIPELINE_USERS = 64


def channel_sends_take(*, user_ids: Sequence[int], hour: int, cap: int) -> set[int]:
    """Count one send for each user this hour; the users still within ``cap``.
    A refused user's count stays counted: the count says how many were tried."""
    allowed: set[int] = set()
    client = get_redis()
    for start in range(0, len(user_ids), _PIPELINE_USERS):
        batch = user_ids[start : start + _PIPELINE_USERS]
        pipe = client.pipeline(transaction=False)
        for user_id in batch:
            name = mc_keys.channel_sends(user_id, hour)
            pipe.incr(name)
            pipe.expire(name, _COUNTER_SECONDS)
        replies = pipe.execute()
        allowed.update(user_id for user_id, count in zip(batch, replies[::2], strict=True) if int(count) <= cap)
    return allowed
