"""How an inbox item is addressed in Redis, whatever its source."""

import json
from datetime import UTC, datetime
from typing import Any, NamedTuple

# The category zsets' order in every per-user inbox script's KEYS.
CATEGORY_ORDER = ("system", "promotion", "transaction", "interaction")


def to_ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)


def ms_to_datetime(value: float | int | str) -> datetime:
    return datetime.fromtimestamp(int(float(value)) / 1000, tz=UTC)


class InboxEntry(NamedTuple):
    """One item as every inbox holds it.

    ``ref`` is the public id (``m12`` message, ``b3`` bulletin, ``n7`` for the
    next source); (month, offset) is its bit in the per-user push/read bitmaps; ``score``
    orders the inbox (creation or display time, ms); ``expire_ms`` 0 = never.

    A named tuple: a fill or a PostgreSQL page builds one per item (10,000 for
    a large inbox), and a tuple is built in a third of a frozen dataclass's
    time (which sets each field through ``object.__setattr__``).
    """

    ref: str
    category: str
    month: int
    offset: int
    score: int
    expire_ms: int = 0
    # Grouping (deliver.lua, _group.lua): "" = never grouped. Not part of the
    # member: a member names the slot, the group is the recipient's state.
    group_key: str = ""
    actor: str = ""

    @property
    def member(self) -> str:
        return f"{self.ref}|{self.category}|{self.month}|{self.offset}"

    @classmethod
    def from_member(cls, member: str, *, score: int = 0, expire_ms: int = 0, group_key: str = "") -> "InboxEntry":
        ref, category, month, offset = member.split("|")
        return cls(ref, category, int(month), int(offset), score, expire_ms, group_key)


def parse_member(member: str) -> tuple[str, str, str, int]:
    ref, category, month, offset = member.split("|")
    return ref, category, month, int(offset)


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
