"""Grouped items in one user's inbox: the rows' groups, the end of a group,
and a group key's items (``?group_key=``).

Delivery keeps the groups (deliver.lua with ``_group.lua``): each grouped
row's JSON holds its count and actors, so a page reads one hash field per
grouped row on it and a count reads nothing more than before.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from core.lua import LuaScript
from core.redis import get_redis
from messagecenter import keys as mc_keys

GROUP_CLOSE_SCRIPT = LuaScript(__file__, "../lua/group_close.lua")


def group_of(raw: bytes | None) -> dict[str, Any] | None:
    """A row's group from its JSON in the groups hash (None: not grouped)."""
    return None if raw is None else _parsed(raw)


@lru_cache(maxsize=16_384)
def _parsed(raw: bytes) -> dict[str, Any]:
    # Parsed once per distinct JSON: a polled page reads the same groups again
    # and again (callers never mutate the dict).
    meta = json.loads(raw)
    # The newest distinct actors, each with its newest item's time (_group.lua);
    # a group written before the times were kept names them alone ("actors").
    # cjson writes an empty Lua table as an object.
    seen = meta.get("seen")
    actors = [entry[0] for entry in seen] if isinstance(seen, list) else meta.get("actors")
    return {
        "key": str(meta["key"]),
        "count": int(meta["count"]),
        "actors": [str(a) for a in actors] if isinstance(actors, list) else [],
    }


def groups_of(*, user_id: int, refs: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The groups of these rows (refs of grouped items), one HMGET."""
    if not refs:
        return {}
    raws = get_redis().hmget(mc_keys.inbox_groups(user_id), list(refs))
    found = {ref: group_of(raw) for ref, raw in zip(refs, raws, strict=True)}
    return {ref: group for ref, group in found.items() if group is not None}


def _close(user_id: int, ref: str, group_key: str) -> int | None:
    until = GROUP_CLOSE_SCRIPT(
        [
            mc_keys.inbox_groups(user_id),
            mc_keys.inbox_groups_open(user_id),
            mc_keys.inbox_groups_closed(user_id),
            mc_keys.inbox_group(user_id, group_key),
            mc_keys.inbox_group_ends(user_id, group_key),
        ],
        [ref, group_key],
    )
    return int(until) if until else None


def group_close(*, user_id: int, ref: str) -> tuple[str, int] | None:
    """End the open group whose row is ``ref``; returns its key and the time
    it ended at (None: ``ref`` is no open group's row)."""
    raw = get_redis().hget(mc_keys.inbox_groups(user_id), ref)
    if raw is None:
        return None
    group_key = str(json.loads(raw)["key"])
    until = _close(user_id, ref, group_key)
    return None if until is None else (group_key, until)


def groups_close_all(*, user_id: int, category: str | None) -> list[tuple[str, int, str]]:
    """End every open group (of ``category``): "read all" read their rows.
    Returns the keys, times they ended at and rows. One call per open group: as
    many as the unread rows "read all" marks anyway."""
    ended = []
    for raw_key, raw_head in get_redis().hgetall(mc_keys.inbox_groups_open(user_id)).items():
        group_key, head = raw_key.decode(), raw_head.decode()
        ref, head_category = head.split("|", 2)[:2]
        if category and head_category != category:
            continue
        until = _close(user_id, ref, group_key)
        if until is not None:
            ended.append((group_key, until, ref))
    return ended


def group_end_member(until_ms: int, row_ref: str) -> str:
    """The ends zset's member of an end (``_group.lua``); a bare time for an end without its row."""
    return f"{until_ms}|{row_ref}|" if row_ref else str(until_ms)


@dataclass(frozen=True)
class GroupItems:
    members: list[tuple[str, int]]  # (member, score), newest first
    more: bool
    open_since: int | None  # the open group's first item's time; None: no open group
    details: list[bytes | None]


def group_items(*, user_id: int, group_key: str, max_score: int | None, skip: int, limit: int) -> GroupItems:
    """A page of the key's items, newest first (cursor: max score, items at it
    already returned), with their details and where the key's open group starts."""
    redis = get_redis()
    top = "+inf" if max_score is None else max_score
    rows = redis.zrevrangebyscore(
        mc_keys.inbox_group(user_id, group_key), top, "-inf", start=skip, num=limit + 1, withscores=True
    )
    members = [(m.decode(), int(s)) for m, s in rows]
    more = len(members) > limit
    members = members[:limit]
    head = redis.hget(mc_keys.inbox_groups_open(user_id), group_key)
    open_since = None
    if head is not None:
        meta = redis.hget(mc_keys.inbox_groups(user_id), head.decode().split("|", 1)[0])
        if meta is not None:
            open_since = int(json.loads(meta)["start"])
    refs = [m.split("|", 1)[0] for m, _ in members]
    details = redis.hmget(mc_keys.item_detail(), refs) if refs else []
    return GroupItems(members=members, more=more, open_since=open_since, details=list(details))


def _position(score: int, ref: str) -> tuple[int, bytes]:
    """Where an item sorts in the list: by time, then equal times by member
    bytewise, as a sorted set orders them (``_group.lua``'s order)."""
    return score, f"{ref}|".encode()


def _end_position(end: bytes, score: float) -> tuple[int, bytes]:
    """Where an end of the ends zset sorts: at its row's position; a bare end
    (no row) past every item of its time, all of which are its group's."""
    row = end.decode().split("|")[1] if b"|" in end else ""
    return (int(score), f"{row}|".encode()) if row else (int(score), b"\xff")


def group_forget(*, user_id: int, ref: str) -> list[str]:
    """Drop the group whose row is ``ref`` (the user deleted the row): its
    items leave the key's list; returns their refs (empty: not a group's row)."""
    redis = get_redis()
    raw = redis.hget(mc_keys.inbox_groups(user_id), ref)
    if raw is None:
        return []
    meta = json.loads(raw)
    key = mc_keys.inbox_group(user_id, str(meta["key"]))
    start = int(meta["start"])
    found = [(m.decode(), int(t)) for m, t in redis.zrangebyscore(key, start, "+inf", withscores=True)]
    row_time = next((t for m, t in found if m.split("|", 1)[0] == ref), None)
    members: list[str] = []
    if row_time is not None:
        # The group's items: past the last end of an earlier group of the key
        # (items at the same time as the row may be theirs) up to its row
        # (later items are later groups').
        row = _position(row_time, ref)
        ends = redis.zrangebyscore(
            mc_keys.inbox_group_ends(user_id, str(meta["key"])), start, row_time, withscores=True
        )
        cuts = [p for p in (_end_position(end, score) for end, score in ends) if p < row]
        after = max(cuts, default=(start - 1, b""))
        members = [m for m, t in found if after < _position(t, m.split("|", 1)[0]) <= row]
    if members:
        redis.zrem(key, *members)
    redis.hdel(mc_keys.inbox_groups(user_id), ref)
    return [m.split("|", 1)[0] for m in members]


GROUP_MERGE_SCRIPT = LuaScript(__file__, "../lua/group_merge.lua", preambles=("../lua/_group.lua",))


def _joins(
    user_id: int, candidates: list[tuple[str, int, int]], wanted: list[int], raws: Sequence[bytes | None]
) -> tuple[list[str], list[Any]]:
    """group_merge.lua's keys and arguments for the wanted candidates that
    carry a group key (their details' ``raws``), oldest first: each joins as
    it would have arrived."""
    script_keys: list[str] = []
    args: list[Any] = []
    for i, raw in sorted(zip(wanted, raws, strict=True), key=lambda pair: candidates[pair[0]][1]):
        detail = json.loads(raw) if raw is not None else {}
        group_key = detail.get("group_key") or ""
        if group_key:
            member, score, expire = candidates[i]
            script_keys += [mc_keys.inbox_group(user_id, group_key), mc_keys.inbox_group_ends(user_id, group_key)]
            args += [group_key, member, score, detail.get("actor") or "", expire]
    return script_keys, args


def merge_candidates(
    *, user_id: int, candidates: list[tuple[str, int, int]], grouped: set[str]
) -> list[tuple[str, int, int]]:
    """The merge's candidates once the grouped broadcasts among them (members
    in ``grouped``, as the pull log marks them) joined their groups
    (group_merge.lua): one HMGET of those candidates' details for their keys
    and actors, and one script call. Bulletins never group."""
    wanted = [i for i, (member, _score, _expire) in enumerate(candidates) if member in grouped]
    if not wanted:
        return candidates
    raws = get_redis().hmget(mc_keys.item_detail(), [candidates[i][0].split("|", 1)[0] for i in wanted])
    group_keys, args = _joins(user_id, candidates, wanted, raws)
    if not args:
        return candidates
    script_keys = [
        mc_keys.inbox(user_id),
        mc_keys.inbox_arrivals(user_id),
        mc_keys.inbox_expiry(user_id),
        mc_keys.inbox_evicted(user_id),
        mc_keys.inbox_groups(user_id),
        mc_keys.inbox_groups_open(user_id),
        mc_keys.inbox_groups_closed(user_id),
        mc_keys.inbox_hidden(user_id),
        *group_keys,
    ]
    dropped = {m.decode() for m in GROUP_MERGE_SCRIPT(script_keys, args)}
    return [c for c in candidates if c[0] not in dropped] if dropped else candidates


def group_holds(*, group_key: str, member: str, user_ids: Sequence[int]) -> set[int]:
    """Which of these users hold ``member`` among their items of ``group_key``
    (out of the list because a newer item of its group took the row)."""
    pipe = get_redis().pipeline(transaction=False)
    for user_id in user_ids:
        pipe.zscore(mc_keys.inbox_group(user_id, group_key), member)
    return {u for u, score in zip(user_ids, pipe.execute(), strict=True) if score is not None}
