"""The activity bitmaps' Redis commands (the policy is insight/activity.py)."""

import secrets
from collections.abc import Sequence

from core.lua import LuaScript
from core.redis import get_redis
from insight import keys as insight_keys

ACTIVITY_MARK_SCRIPT = LuaScript(__file__, "lua/activity_mark.lua")


def activity_mark(*, chunk: int, offset: int, day: str, keep_seconds: int) -> None:
    ACTIVITY_MARK_SCRIPT([insight_keys.activity_day(chunk, day)], [int(offset), int(keep_seconds)])


def activity_counts(*, chunk: int, day_sets: Sequence[Sequence[str]], op: str) -> list[int]:
    """For each list of days, the number of users of the chunk whose bits are set
    in any (``op`` "OR") or all (``op`` "AND") of those days' bitmaps: one BITOP
    into a scratch key and one BITCOUNT each (a single day: BITCOUNT alone), in
    one pipeline. Every key has the chunk's tag, so a cluster runs it on one slot."""
    client = get_redis()
    pipe = client.pipeline(transaction=False)
    nonce = secrets.token_hex(6)
    plan: list[int] = []  # replies per day set
    for index, days in enumerate(day_sets):
        names = [insight_keys.activity_day(chunk, day) for day in days]
        if len(names) == 1:
            pipe.bitcount(names[0])
            plan.append(1)
            continue
        scratch = insight_keys.activity_scratch(chunk, f"{nonce}:{index}")
        pipe.execute_command("BITOP", op, scratch, *names)  # (redis-py blocks pipe.bitop on a cluster)
        pipe.pexpire(scratch, 60_000)
        pipe.bitcount(scratch)
        pipe.delete(scratch)
        plan.append(4)
    replies = iter(pipe.execute())
    counts = []
    for size in plan:
        taken = [next(replies) for _ in range(size)]
        counts.append(int(taken[0] if size == 1 else taken[2]))
    return counts


def activity_days_raw(*, chunk: int, days: Sequence[str]) -> list[bytes | None]:
    """The days' bitmaps of one chunk as stored (for intersections with bitmaps
    that live in other slots: an app's per-item read bitmaps)."""
    pipe = get_redis().pipeline(transaction=False)
    for day in days:
        pipe.get(insight_keys.activity_day(chunk, day))
    return list(pipe.execute())
