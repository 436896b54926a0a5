"""Redis side of the message centre's drift checks (``messagecenter/drift.py``).

Reads only, batched into pipelines, plus the one narrow write no mirror
covers (dropping stray bulletin config members). Everything else a repair
does goes through the ordinary idempotent mirrors and publish functions.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.redis import get_redis
from messagecenter import keys as mc_keys

# Fields (or members) per HSCAN / SSCAN / SCAN page: bounded round trips
# without blocking the server on a large structure.
SCAN_COUNT = 1000


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class BulletinConfig:
    """The bulletins' global structures as Redis holds them."""

    scores: dict[str, int]  # config member (``<bulletin>_<group>``) -> display ms
    details: dict[str, str]  # config member -> JSON
    members: dict[str, str]  # bulletin id -> comma-separated config members
    logged: frozenset[str] = frozenset()  # config members in the change log


def bulletin_config_read() -> BulletinConfig:
    """Config zset, config detail hash, members hash and change log, read together (bulletins are few)."""
    pipe = get_redis().pipeline(transaction=False)
    pipe.zrange(mc_keys.bulletin_config(), 0, -1, withscores=True)
    pipe.hgetall(mc_keys.bulletin_detail())
    pipe.hgetall(mc_keys.bulletin_members())
    pipe.zrange(mc_keys.bulletin_changes(), 0, -1)
    scores, details, members, logged = pipe.execute()
    return BulletinConfig(
        scores={_text(m): int(s) for m, s in scores},
        details={_text(k): _text(v) for k, v in details.items()},
        members={_text(k): _text(v) for k, v in members.items()},
        logged=frozenset(_text(m) for m in logged),
    )


def bulletin_config_drop(*, members: Sequence[str], bulletin_ids: Sequence[int] = ()) -> None:
    """Remove stray config members (no bulletin or group in PostgreSQL has them) and
    the members-hash entries of ``bulletin_ids``.

    ``bulletin_put`` only drops the members its members hash lists, so a member
    that hash does not know would outlive every mirror; the caller mirrors the
    bulletin (or deletes it) afterwards so inboxes settle.
    """
    pipe = get_redis().pipeline(transaction=False)
    if members:
        pipe.zrem(mc_keys.bulletin_config(), *members)
        pipe.hdel(mc_keys.bulletin_detail(), *members)
        pipe.zrem(mc_keys.bulletin_changes(), *members)
    if bulletin_ids:
        pipe.hdel(mc_keys.bulletin_members(), *(str(b) for b in bulletin_ids))
    pipe.execute()


def item_details_get(*, refs: Sequence[str]) -> dict[str, dict[str, Any] | None]:
    """Stored detail JSON of each ref (None when missing or not JSON)."""
    if not refs:
        return {}
    raw = get_redis().hmget(mc_keys.item_detail(), list(refs))
    out: dict[str, dict[str, Any] | None] = {}
    for ref, value in zip(refs, raw, strict=True):
        try:
            parsed = json.loads(value) if value is not None else None
        except ValueError:
            parsed = None
        out[ref] = parsed if isinstance(parsed, dict) else None
    return out


def item_detail_refs() -> list[str]:
    """Every ref the item detail hash holds (HSCAN, never one big HGETALL)."""
    return [_text(field) for field, _ in get_redis().hscan_iter(mc_keys.item_detail(), count=SCAN_COUNT)]


def item_details_drop(*, refs: Sequence[str]) -> None:
    """Drop details nothing in PostgreSQL backs and no inbox member can be derived for."""
    if refs:
        get_redis().hdel(mc_keys.item_detail(), *refs)


def subscribers_get_many(*, pairs: Sequence[tuple[int, str]]) -> list[set[str]]:
    """Members of each (message type, scope) subscriber set: one pipeline."""
    pipe = get_redis().pipeline(transaction=False)
    for type_id, scope in pairs:
        pipe.smembers(mc_keys.subscribers(type_id, scope))
    return [{_text(m) for m in raw} for raw in pipe.execute()] if pairs else []


def user_groups_get_many(*, user_ids: Sequence[int]) -> list[set[int]]:
    """The group ids Redis holds for each user: one pipeline."""
    pipe = get_redis().pipeline(transaction=False)
    for user_id in user_ids:
        pipe.smembers(mc_keys.user_groups(user_id))
    return [{int(m) for m in raw} for raw in pipe.execute()] if user_ids else []


def subscriber_set_pairs() -> set[tuple[int, str]]:
    """(type, scope) of every non-empty subscriber set in Redis, by SCAN (never KEYS)."""
    found: set[tuple[int, str]] = set()
    for key in get_redis().scan_iter(match=mc_keys.subscribers_match(), count=SCAN_COUNT):
        pair = mc_keys.subscribers_parse(_text(key))
        if pair is not None:
            found.add(pair)
    return found
