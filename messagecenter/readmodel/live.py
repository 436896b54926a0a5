"""The inbox's side of live updates: the counts ETag.

The transport (versions, pub/sub, streams) is core's (``core.live``); what
the inbox adds is an ETag over everything its counts depend on.
"""

from typing import Any

from core import keys
from core.platforms import ALL_PLATFORMS
from core.redis import get_redis

# Time-driven changes (an item expiring, a scheduled announcement going live)
# bump no counter; the ETag therefore also carries a time bucket, which bounds
# how long a 304 can hide such a change.
ETAG_TIME_BUCKET_MS = 60_000


def counts_etag(*, user_id: int, now_ms: int) -> str:
    """A weak ETag that changes whenever the user's counts can have changed.

    Besides the user's own version it takes in the global markers that make
    every inbox merge or settle (removals, pull items, bulletin edits and
    display times passing) and the announcement index revisions, all read in
    one pipeline; no SQL, no Lua.
    """
    client = get_redis()
    pipe = client.pipeline(transaction=False)
    pipe.get(keys.live_user_version(user_id))
    pipe.get(keys.mc_removed_version())
    pipe.get(keys.mc_pull_sequence())
    pipe.get(keys.mc_bulletin_update_time())
    pipe.zrevrangebyscore(keys.mc_bulletin_config(), now_ms, "-inf", start=0, num=1, withscores=True)
    for platform in ALL_PLATFORMS:
        pipe.get(keys.notice_revision(platform))
    # Snoozed items, and those whose wake time has come (not woken yet): a
    # wake moves the counts and bumps no version, so both states show here.
    pipe.zcard(keys.mc_inbox_snoozed(user_id))
    pipe.zcount(keys.mc_inbox_snoozed(user_id), "-inf", now_ms)
    *replies, snoozed, due = pipe.execute()
    latest = replies[4]
    parts = [
        _text(replies[0]),
        _text(replies[1]),
        _text(replies[2]),
        _text(replies[3]),
        str(int(latest[0][1])) if latest else "0",
        *(_text(r) for r in replies[5:]),
        f"{int(snoozed)}s{int(due)}",
        str(now_ms // ETAG_TIME_BUCKET_MS),
    ]
    return f'W/"{user_id}.{"-".join(parts)}"'


def _text(value: Any) -> str:
    if value is None:
        return "0"
    return value.decode() if isinstance(value, bytes) else str(value)
