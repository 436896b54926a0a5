"""What the tests read of users' Redis structures directly, to hold the
read model's own invariants (the product reads them through its scripts)."""

from collections.abc import Sequence
from dataclasses import dataclass

from core.redis import get_redis
from messagecenter import keys as mc_keys


def user_groups_get(*, user_ids: Sequence[int]) -> dict[int, set[int]]:
    """Each user's mirrored group ids (empty set when the key is missing): one pipeline."""
    pipe = get_redis().pipeline(transaction=False)
    for user_id in user_ids:
        pipe.smembers(mc_keys.user_groups(user_id))
    replies = pipe.execute() if user_ids else []
    return {int(u): {int(g) for g in raw} for u, raw in zip(user_ids, replies, strict=True)}


@dataclass(frozen=True)
class UnreadIndex:
    """One user's unread counters against the sizes of their unread zsets."""

    counters: dict[str, int]  # category -> the counter (missing fields: 0)
    sizes: dict[str, int]  # category -> ZCARD of its unread zset; "" -> of the all zset


def unread_index_read(*, user_id: int, categories: Sequence[str]) -> UnreadIndex:
    """The user's counters hash and unread zset sizes: one pipeline."""
    pipe = get_redis().pipeline(transaction=False)
    pipe.hgetall(mc_keys.inbox_counters(user_id))
    for category in ("", *categories):
        pipe.zcard(mc_keys.inbox_unread(user_id, category))
    raw, *sizes = pipe.execute()
    counters = {c: int(raw.get(c.encode(), 0)) for c in categories}
    return UnreadIndex(counters, dict(zip(("", *categories), map(int, sizes), strict=True)))
