"""The mute rule, in one place for every path that decides what an inbox holds.

A user mutes a category or a message type for a span of time (a
``MutePeriod`` row: ``(start_ms, end_ms]``, open while still muted). An item
is hidden from the user exactly when the time it arrived (its creation; for
a bulletin the later of its creation and its display time, so one backdated
to show at once still arrives now; in ms) falls in a period of its category
or, for a notification, of its message type.

Why the period is open at its start and closed at its end: a fan-out runs
after the item was created. An item created in the same millisecond as a
mute, before it, and pushed after it must stay delivered (so the start is
out); an item created in the same millisecond as an unmute, before it, was
skipped by a fan-out that ran while muted and must stay hidden (so the end is
in). With these bounds the answer depends on the item's time and the periods
alone, never on when a fan-out, a merge or a rebuild ran:
push delivery (services), the merge on read (readmodel.inbox), the rebuild
and the PostgreSQL fallback all call ``Mutes.hides`` and so agree, and
unmuting brings back nothing that arrived while muted.

The read model keeps each user's periods as one JSON string (``dumps``,
``loads``) for the merge on read; PostgreSQL holds the truth.
"""

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Period = tuple[int, int | None]


def _within(periods: Iterable[Period], time_ms: int) -> bool:
    return any(start < time_ms and (end is None or time_ms <= end) for start, end in periods)


@dataclass(frozen=True)
class Mutes:
    """One user's mute periods: by category, and by message type id."""

    categories: Mapping[str, tuple[Period, ...]] = field(default_factory=dict)
    types: Mapping[int, tuple[Period, ...]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.categories and not self.types

    def hides(self, *, category: str, time_ms: int, message_type_id: int | None = None) -> bool:
        if _within(self.categories.get(category, ()), time_ms):
            return True
        return message_type_id is not None and _within(self.types.get(int(message_type_id), ()), time_ms)

    def dumps(self) -> str:
        """The JSON Redis keeps; "" for no mutes (Redis then keeps no key)."""
        if self.empty:
            return ""
        return json.dumps(
            {
                "c": {c: [list(p) for p in periods] for c, periods in sorted(self.categories.items())},
                "t": {str(t): [list(p) for p in periods] for t, periods in sorted(self.types.items())},
            },
            separators=(",", ":"),
        )

    @classmethod
    def loads(cls, raw: str | bytes | None) -> "Mutes":
        if not raw:
            return NO_MUTES
        data: dict[str, Any] = json.loads(raw)
        return cls(
            categories={str(c): _periods(p) for c, p in data.get("c", {}).items()},
            types={int(t): _periods(p) for t, p in data.get("t", {}).items()},
        )

    @classmethod
    def of(cls, rows: Iterable[tuple[str, int | None, int, int | None]]) -> "Mutes":
        """From (category, message type id, start ms, end ms) rows."""
        categories: dict[str, list[Period]] = {}
        types: dict[int, list[Period]] = {}
        for category, type_id, start, end in rows:
            if type_id is not None:
                types.setdefault(int(type_id), []).append((int(start), end))
            elif category:
                categories.setdefault(category, []).append((int(start), end))
        return cls(
            categories={c: tuple(sorted(p, key=_order)) for c, p in categories.items()},
            types={t: tuple(sorted(p, key=_order)) for t, p in types.items()},
        )


def _order(period: Period) -> tuple[int, int]:
    return period[0], -1 if period[1] is None else period[1]


def _periods(raw: Iterable[Any]) -> tuple[Period, ...]:
    return tuple((int(start), None if end is None else int(end)) for start, end in raw)


NO_MUTES = Mutes()
