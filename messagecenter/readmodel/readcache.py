"""The read cache's rule, defined once: which values tag a cached first page
or the counts, in which order, and how a held tag is compared.

The page and counts scripts (``_cache.lua``) build the tag from values they
read anyway; a poll checks it with plain reads instead (``check_commands``
and ``checked`` below: the script costs Redis ~10x the CPU). Both follow
``TAG``: its names, order and separators reach the scripts as Lua constants
(``lua_constants``), so the two sides cannot disagree on the tag's shape;
tests/messagecenter/test_page_cache.py holds the two answers equal.

A value is held in the user's page-cache hash under its field, with
``<tag>|<valid until ms>`` under the field plus ``#`` ("" = no time limit).
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from live import keys as live_keys
from messagecenter import keys as mc_keys


@dataclass(frozen=True)
class TagPart:
    """One value of the tag: a string key's value, or a hash field."""

    name: str  # what _cache.lua calls the value
    key: Callable[[int], str]  # user id -> the key holding it
    field: str | None = None  # the hash field (None: a string key)
    # Required: the fast path never tags without it (level() refuses), so
    # its absence means nothing held can be current. Else missing reads "0".
    required: bool = False


# The tag: every value a first page or the counts depend on. The user's rev
# (moves with any change to their keys), how many of the user's writes are in
# flight (one that outlives its grace has the user filled again), the live
# version deliveries bump, the item details' version edits bump, then what
# level() compares to know nothing needs settling or merging.
TAG = (
    TagPart("rev", mc_keys.inbox_state, "rev"),
    TagPart("writing", mc_keys.inbox_state, "w"),
    TagPart("live", live_keys.user_version),
    TagPart("details", lambda _user: mc_keys.item_detail_version()),
    TagPart("removed", lambda _user: mc_keys.removed_version()),
    TagPart("pulled", lambda _user: mc_keys.pull_sequence()),
    TagPart("updated", lambda _user: mc_keys.bulletin_update_time()),
    TagPart("shown", mc_keys.inbox_state, "bd", required=True),
    TagPart("access", mc_keys.bulletin_access_time, required=True),
)
JOIN = ":"  # between the tag's values
UNTIL = "|"  # between the tag and the time it stays valid until

# What _cache.lua receives of the rule.
LUA_CONSTANTS = {"CACHE_TAG": [part.name for part in TAG], "CACHE_JOIN": JOIN, "CACHE_UNTIL": UNTIL}


def held_tag(tag: str, until: str) -> str:
    """What is stored under ``<field>#`` beside a value."""
    return f"{tag}{UNTIL}{until}"


# The tag's hash fields grouped by their hash (one HMGET each), and its string keys (one MGET).
_HASHES: dict[Callable[[int], str], list[TagPart]] = {}
for _part in TAG:
    if _part.field is not None:
        _HASHES.setdefault(_part.key, []).append(_part)
_STRINGS = [part for part in TAG if part.field is None]


def check_commands(user_id: int, field: str) -> tuple[tuple[str, ...], ...]:
    """The check's commands, one MULTI so the values are read at one instant:
    the held value and its tag, one HMGET per hash of the tag, one MGET of
    its string keys."""
    return (
        ("MULTI",),
        ("HMGET", mc_keys.inbox_pages(user_id), f"{field}#", field),
        *(("HMGET", key(user_id), *(str(p.field) for p in parts)) for key, parts in _HASHES.items()),
        ("MGET", *(part.key(user_id) for part in _STRINGS)),
        ("EXEC",),
    )


def _values(replies: Sequence[Any]) -> list[Any]:
    """The tag's values in ``TAG`` order from the HMGET and MGET replies of ``check_commands``."""
    by_part: dict[int, Any] = {}
    for parts, reply in zip([*_HASHES.values(), _STRINGS], replies, strict=True):
        by_part.update((id(part), value) for part, value in zip(parts, reply, strict=True))
    return [by_part[id(part)] for part in TAG]


class Missing:
    """Nothing is held (or a required value is missing): the script must compute."""


MISSING = Missing()


def checked(exec_reply: Sequence[Any], now_ms: int) -> tuple[bytes, float] | Missing | None:
    """The value the check's EXEC read with the time it stops being current
    (inf: none) if its tag equals the current values and that time has not
    come; None when stale; ``MISSING`` when nothing is held to compare."""
    (tag_held, value), *replies = exec_reply
    values = _values(replies)
    if tag_held is None or value is None or any(v is None for v, p in zip(values, TAG, strict=True) if p.required):
        return MISSING
    tag, cut, until = tag_held.partition(UNTIL.encode())
    if not cut:
        return None  # not a held tag: never current (as _cache.lua reads it)
    current = JOIN.encode().join(v if v is not None else b"0" for v in values)
    until_ms = float(until) if until else math.inf
    if tag != current or now_ms >= until_ms:
        return None
    return bytes(value), until_ms
