"""The Redis side of a user's fill (messagecenter/fill.py): drop what is left of
the user's part of the read model before it is filled again, and mark it filled."""

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.keys import fill_lock
from core.lua import LuaScript
from core.readmodel import cache_fill_lock_queue
from core.redis import get_redis
from messagecenter import keys as mc_keys
from messagecenter.readmodel.entries import CATEGORY_ORDER
from messagecenter.readmodel.grouping import group_end_member

WRITE_BEGIN_SCRIPT = LuaScript(__file__, "../lua/write_begin.lua")
WRITE_END_SCRIPT = LuaScript(__file__, "../lua/write_end.lua")
WRITE_NOTE = b"w:"  # a write in flight's field in the state hash: "w:<token>" = its start (ms)


@dataclass(frozen=True)
class FillStart:
    """What a fill learns with its lock: the removal log's version, the key
    names of the user's part that Redis holds (months, groups) and the user's
    writes in flight (token -> start, ms)."""

    removal_version: int
    months: list[str]
    group_keys: set[str]
    writes: dict[str, int]


def user_part_fill_start(*, user_id: int, token: str, lease_ms: int) -> FillStart | None:
    """Take the user's fill lock (the state hash's) and, in the same round trip,
    read the removal log's version and the names of what Redis holds of the
    user's part (a stale copy may know months and groups PostgreSQL no longer
    does); None, having read nothing of use, when another process holds the lock."""
    pipe = get_redis().pipeline(transaction=False)
    cache_fill_lock_queue(pipe, key=mc_keys.inbox_state(user_id), token=token, lease_ms=lease_ms)
    pipe.get(mc_keys.removed_version())
    pipe.hgetall(mc_keys.inbox_state(user_id))
    _names_queue(pipe, user_id)
    locked, version, state, *names = pipe.execute()
    if not locked:
        return None
    writes = {f[len(WRITE_NOTE) :].decode(): int(v) for f, v in state.items() if f.startswith(WRITE_NOTE)}
    return _held(int(version or 0), writes, *names)


def user_part_drop(*, user_id: int, group_keys: Iterable[str], held: FillStart | None = None) -> None:
    """Delete every key of the user's part: whatever a stale copy of Redis, or the
    deliveries since a loss, left there is filled again from PostgreSQL.
    ``group_keys`` names those of the ended groups (PostgreSQL's ends); the
    months and the open and listed groups' keys are those ``held`` read (a
    fill read them with its lock), else read here."""
    client = get_redis()
    if held is None:
        pipe = client.pipeline(transaction=False)
        _names_queue(pipe, user_id)
        held = _held(0, {}, *pipe.execute())
    names = mc_keys.user_part(
        user_id, categories=CATEGORY_ORDER, months=held.months, group_keys=sorted({*group_keys, *held.group_keys})
    )
    # One slot (the user's tag): one command, freed in the background.
    client.unlink(*names)


def _names_queue(pipe: Any, user_id: int) -> None:
    """Queue the reads of the names Redis holds of the user's part: its months,
    the open groups' keys and the rows' groups (``_held`` reads the replies)."""
    pipe.smembers(mc_keys.inbox_months(user_id))
    pipe.hkeys(mc_keys.inbox_groups_open(user_id))
    pipe.hvals(mc_keys.inbox_groups(user_id))


def _held(
    version: int, writes: dict[str, int], months: Iterable[bytes], opened: Iterable[bytes], rows: Iterable[bytes]
) -> FillStart:
    group_keys = {k.decode() for k in opened}
    for raw in rows:
        group = json.loads(raw)
        if isinstance(group, dict) and isinstance(group.get("key"), str):
            group_keys.add(group["key"])
    return FillStart(version, sorted(m.decode() for m in months), group_keys, writes)


def user_part_own_put(
    *,
    user_id: int,
    group_ids: Sequence[int],
    mutes: str,
    hidden: Sequence[str],
    ends: Mapping[str, Sequence[tuple[int, str]]],
) -> None:
    """Write the user's own rows into a part just dropped, in one round trip
    (the user's keys share one slot): the ids of their groups, their mute
    periods (``Mutes.dumps``; "" = none), the refs they hid (no merge brings
    them in) and their ended groups (group key -> (until ms, row ref)). The
    paths that change one of these in a filled part go through the inbox
    scripts; a part just dropped holds nothing they would have to move."""
    if not (group_ids or mutes or hidden or ends):
        return
    pipe = get_redis().pipeline(transaction=False)
    if group_ids:
        pipe.sadd(mc_keys.user_groups(user_id), *group_ids)
    if mutes:
        pipe.set(mc_keys.user_mutes(user_id), mutes)
    if hidden:
        pipe.sadd(mc_keys.inbox_hidden(user_id), *hidden)
    for group_key, times in ends.items():
        pipe.zadd(mc_keys.inbox_group_ends(user_id, group_key), {group_end_member(e, ref): e for e, ref in times})
    pipe.execute()


def user_part_filled(
    *, user_id: int, generation: str, idle_ms: int, settled: int, writes: Mapping[str, int] | None = None
) -> None:
    """Mark the user's part filled for this generation (the checked calls then run),
    settled up to removal ``settled`` (the version before PostgreSQL was read:
    every removal up to it had committed, so the fill left its item out, and
    the user's first read settles only the removals since instead of checking
    every item against its detail), its state hash to expire after ``idle_ms``
    without one, and the user among those the idle job looks at. ``writes``:
    the user's writes in flight to note again (token -> start, ms; the drop
    took their notes), which may commit after the fill read PostgreSQL."""
    state = mc_keys.inbox_state(user_id)
    pipe = get_redis().pipeline(transaction=False)
    fields: dict[str, Any] = {"fill": generation, "settled": settled}
    if writes:
        fields.update({f"{WRITE_NOTE.decode()}{token}": start for token, start in writes.items()})
        fields["w"] = len(writes)
    pipe.hset(state, mapping=fields)
    if generation:
        pipe.pexpire(state, idle_ms)
    pipe.sadd(mc_keys.filled_users(), user_id)
    pipe.execute()


def filled_users_scan(*, cursor: int, count: int) -> tuple[int, list[int]]:
    """One SSCAN step of the users the idle job looks at: (next cursor, ids)."""
    cursor, members = get_redis().sscan(mc_keys.filled_users(), cursor=cursor, count=count)
    return int(cursor), [int(m) for m in members]


def filled_users_forget(*, user_ids: list[int]) -> None:
    if user_ids:
        get_redis().srem(mc_keys.filled_users(), *user_ids)


def users_filled(*, user_ids: list[int], generation: str) -> set[int]:
    """Those of the users whose part is filled for this generation (one pipeline)."""
    pipe = get_redis().pipeline(transaction=False)
    for user_id in user_ids:
        pipe.hget(mc_keys.inbox_state(user_id), "fill")
    wanted = generation.encode()
    return {user_id for user_id, held in zip(user_ids, pipe.execute(), strict=True) if held == wanted}


def users_held(*, user_ids: list[int]) -> set[int]:
    """Those of the users whose part Redis holds (filled, for whichever
    generation) or is filling (its fill lock held): the parts a background write
    still has to reach, as deliver.lua decides for a fan-out (one pipeline)."""
    pipe = get_redis().pipeline(transaction=False)
    for user_id in user_ids:
        state = mc_keys.inbox_state(user_id)
        pipe.hexists(state, "fill")
        pipe.exists(fill_lock(state))
    replies = pipe.execute()
    return {user_id for i, user_id in enumerate(user_ids) if replies[2 * i] or replies[2 * i + 1]}


def user_part_write_begin(*, user_id: int, token: str, now_ms: int, idle_ms: int) -> None:
    """Note a write of the user in flight (write_begin.lua): before its commit."""
    WRITE_BEGIN_SCRIPT([mc_keys.inbox_state(user_id)], [token, now_ms, idle_ms])


def user_part_write_end(*, user_id: int, token: str) -> None:
    """The write is done (write_end.lua): after its Redis half."""
    WRITE_END_SCRIPT([mc_keys.inbox_state(user_id)], [token])
