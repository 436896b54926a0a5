"""How an inbox item is addressed in Redis, whatever its source."""

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from core import keys
from core.lua import LuaScript
from core.redis import get_redis, is_cluster

INBOX_SCRIPT = LuaScript(__file__, "../lua/inbox.lua")
GLOBAL_SCRIPT = LuaScript(__file__, "../lua/global.lua")
DELIVER_SCRIPT = LuaScript(__file__, "../lua/deliver.lua")

# Fixed KEYS of inbox.lua before the per-month bitmaps.
CATEGORY_ORDER = ("system", "promotion", "transaction", "interaction")


def to_ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)


def ms_to_datetime(value: float | int | str) -> datetime:
    return datetime.fromtimestamp(int(float(value)) / 1000, tz=UTC)


@dataclass(frozen=True)
class InboxEntry:
    """One item as every inbox holds it.

    ``ref`` is the public id (``m12`` message, ``b3`` bulletin, ``n7`` for the
    next source); (month, offset) is its slot in seed 004's bitmaps; ``score``
    orders the inbox (creation or display time, ms); ``expire_ms`` 0 = never.
    """

    ref: str
    category: str
    month: int
    offset: int
    score: int
    expire_ms: int = 0

    @property
    def member(self) -> str:
        return f"{self.ref}|{self.category}|{self.month}|{self.offset}"

    @classmethod
    def from_member(cls, member: str, *, score: int = 0, expire_ms: int = 0) -> "InboxEntry":
        ref, category, month, offset = member.split("|")
        return cls(ref, category, int(month), int(offset), score, expire_ms)


def parse_member(member: str) -> tuple[str, str, str, int]:
    ref, category, month, offset = member.split("|")
    return ref, category, month, int(offset)


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def global_keys() -> list[str]:
    return [
        keys.mc_item_detail(),
        keys.mc_bulletin_config(),
        keys.mc_bulletin_detail(),
        keys.mc_bulletin_members(),
        keys.mc_bulletin_update_time(),
        keys.mc_removed(),
        keys.mc_removed_version(),
        keys.mc_pull(),
        keys.mc_pull_sequence(),
        keys.mc_removed_floor(),
        keys.mc_item_detail_version(),
    ]


def user_keys(user_id: int, months: list[str]) -> list[str]:
    """KEYS of inbox.lua for this user and these months (all one hash tag)."""
    return [
        keys.mc_inbox(user_id),
        *(keys.mc_inbox_category(user_id, c) for c in CATEGORY_ORDER),
        keys.mc_inbox_counters(user_id),
        keys.mc_inbox_hidden(user_id),
        keys.mc_inbox_expiry(user_id),
        keys.mc_inbox_months(user_id),
        keys.mc_inbox_state(user_id),
        keys.mc_bulletin_access_time(user_id),
        *(keys.mc_read_bitmap(user_id, m) for m in months),
        *(keys.mc_push_bitmap(user_id, m) for m in months),
    ]


def run_inbox_scripts(calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
    """Run many per-user inbox.lua calls: one pipeline on a single Redis.

    On Redis Cluster each call goes to its own slot's node one by one:
    redis-py's ClusterPipeline refuses EVALSHA.
    """
    if not calls:
        return []
    if is_cluster():
        return [INBOX_SCRIPT(script_keys, args) for script_keys, args in calls]
    pipe = get_redis().pipeline(transaction=False)
    for script_keys, args in calls:
        INBOX_SCRIPT(script_keys, args, client=pipe)
    return list(pipe.execute())
