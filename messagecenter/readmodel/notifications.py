"""Redis side of subscriptions: subscriber sets per (type, scope),
each user's notification zset (score = expiry) and the holders index the
sweep walks. Delivery into inboxes itself goes through ``publish.inbox_deliver``."""

from collections.abc import Iterable

from core.redis import get_redis
from messagecenter import keys as mc_keys
from messagecenter.readmodel.entries import InboxEntry
from messagecenter.readmodel.scripts import InboxCall, SweepOp, inbox_call, run_inbox_calls


def subscribers_replace(*, message_type_id: int, scope: str, members: Iterable[str]) -> None:
    """Mirror the subscribers (``u<id>`` / ``g<id>``) of one (type, scope) from PostgreSQL."""
    key = mc_keys.subscribers(message_type_id, scope)
    wanted = sorted(set(members))
    pipe = get_redis().pipeline(transaction=True)
    pipe.delete(key)
    if wanted:
        pipe.sadd(key, *wanted)
    pipe.execute()


def subscribers_get(*, message_type_id: int, scope: str) -> set[str]:
    return {m.decode() for m in get_redis().smembers(mc_keys.subscribers(message_type_id, scope))}


def notifications_index(*, entry: InboxEntry, user_ids: Iterable[int]) -> None:
    """Record delivered notifications for the sweep: the user's zset (NX, so a
    rerun changes nothing) and the holders index."""
    ids = [int(u) for u in user_ids]
    if not ids:
        return
    pipe = get_redis().pipeline(transaction=False)
    for user_id in ids:
        pipe.zadd(mc_keys.user_notifications(user_id), {entry.member: entry.expire_ms}, nx=True)
    pipe.sadd(mc_keys.notification_holders(), *ids)
    pipe.execute()


def _sweep_users(user_ids: list[int], *, now_ms: int, limit: int) -> int:
    """One bounded sweep call per user (and more while a user has more); returns items removed."""
    client = get_redis()
    removed = 0
    pending = list(user_ids)
    while pending:
        pipe = client.pipeline(transaction=False)
        for user_id in pending:
            pipe.smembers(mc_keys.inbox_months(user_id))
        months_by_user = [sorted(m.decode() for m in raw) for raw in pipe.execute()]
        sweep = SweepOp(limit=limit)
        calls: list[InboxCall] = [
            inbox_call(sweep, user_id=user_id, now_ms=now_ms, months=months)
            for user_id, months in zip(pending, months_by_user, strict=True)
        ]
        results = run_inbox_calls(calls)
        emptied = []
        again = []
        for user_id, (gone, more, left) in zip(pending, results, strict=True):
            removed += int(gone)
            if int(more):
                again.append(user_id)
            elif int(left) == 0:
                emptied.append(user_id)
        if emptied:
            _holders_drop(emptied)
        pending = again
    return removed


def _holders_drop(user_ids: list[int]) -> None:
    client = get_redis()
    client.srem(mc_keys.notification_holders(), *user_ids)
    # A delivery may have landed between the sweep and the SREM (different
    # slots, so no one script can do both): put such users back.
    pipe = client.pipeline(transaction=False)
    for user_id in user_ids:
        pipe.zcard(mc_keys.user_notifications(user_id))
    back = [u for u, n in zip(user_ids, pipe.execute(), strict=True) if int(n)]
    if back:
        client.sadd(mc_keys.notification_holders(), *back)


def notifications_sweep(*, now_ms: int, batch: int, limit: int) -> tuple[int, int]:
    """Walk the holders index with SSCAN (never KEYS) ``batch`` users at a time;
    each user's expired notifications leave in calls of at most ``limit``.
    Returns (users visited, items removed from inboxes)."""
    client = get_redis()
    cursor: int = 0
    visited = removed = 0
    seen: set[int] = set()
    while True:
        cursor, raw = client.sscan(mc_keys.notification_holders(), cursor, count=batch)
        # SSCAN may return a member twice; sweeping twice is harmless but wasteful.
        user_ids = [u for u in (int(x) for x in raw) if u not in seen]
        seen.update(user_ids)
        if user_ids:
            visited += len(user_ids)
            removed += _sweep_users(user_ids, now_ms=now_ms, limit=limit)
        if int(cursor) == 0:
            break
    return visited, removed
