"""Shared pieces of the admin's read insight (announcements, messages, bulletins):
first reads per hour turned into a timeline with running totals, the
coordinates of the server-side SVG charts drawn from it, and the walk that
finds who has not read an item yet."""

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import QuerySet

HOUR_MS = 3_600_000
# Lifetime of a per-hour first-read counter hash (refreshed on every count).
READ_HOURS_TTL_SECONDS = 180 * 24 * 3600
CHART_WIDTH, CHART_HEIGHT = 600, 200


@dataclass(frozen=True)
class TimelinePoint:
    hour: datetime
    reads: int  # first reads within the hour
    cumulative: int


def hour_of(ms: int) -> int:
    """The hour bucket (ms since the epoch // 3,600,000) a time in ms falls in."""
    return int(ms) // HOUR_MS


def hours_from_hashes(replies: list[Mapping[Any, Any]]) -> dict[datetime, int]:
    """Add up HGETALL replies of hour -> count hashes, oldest hour first."""
    totals: dict[int, int] = {}
    for reply in replies:
        for hour, count in reply.items():
            totals[int(hour)] = totals.get(int(hour), 0) + int(count)
    return {datetime.fromtimestamp(hour * HOUR_MS / 1000, tz=UTC): totals[hour] for hour in sorted(totals)}


def timeline(hours: Mapping[datetime, int]) -> list[TimelinePoint]:
    """First reads per hour (oldest first) with the running total."""
    points, total = [], 0
    for hour, reads in hours.items():
        total += reads
        points.append(TimelinePoint(hour=hour, reads=reads, cumulative=total))
    return points


def rate_chart(points: list[TimelinePoint], reachable: int) -> dict[str, Any] | None:
    """Coordinates of an SVG step line of the cumulative read rate (0-100 %), one step per hour.

    Drawn server-side as inline SVG: no chart library, no script, and the
    figures are in a table beside it for screen readers.
    """
    if not points or reachable <= 0:
        return None
    start = points[0].hour.timestamp()
    span = max(points[-1].hour.timestamp() - start, 3600.0)
    coords = [f"0,{CHART_HEIGHT:.1f}"]
    for point in points:
        x = (point.hour.timestamp() - start) / span * CHART_WIDTH
        y = CHART_HEIGHT - min(point.cumulative / reachable, 1.0) * CHART_HEIGHT
        coords.append(f"{x:.1f},{y:.1f}")
    final = points[-1].cumulative / reachable
    return {
        "width": CHART_WIDTH,
        "height": CHART_HEIGHT,
        "points": " ".join(coords),
        "final_percent": f"{min(final, 1.0):.1%}",
        "first": points[0].hour,
        "last": points[-1].hour,
    }


def bar_chart(values: Sequence[int]) -> dict[str, Any] | None:
    """Coordinates of an SVG bar chart, one bar per value (readers per day),
    scaled to the largest; None when every value is 0."""
    top = max(values, default=0)
    if top <= 0:
        return None
    step = CHART_WIDTH / len(values)
    bars = [
        {
            "x": f"{index * step:.1f}",
            "y": f"{CHART_HEIGHT - value / top * CHART_HEIGHT:.1f}",
            "width": f"{max(step - 1, 1):.1f}",
            "height": f"{value / top * CHART_HEIGHT:.1f}",
            "value": value,
        }
        for index, value in enumerate(values)
    ]
    return {"width": CHART_WIDTH, "height": CHART_HEIGHT, "top": top, "bars": bars}


# --- who has not read it ----------------------------------------------------------------

UserBatch = list[tuple[int, str]]  # (id, username), in id order


def user_batches(users: QuerySet[Any], *, after_id: int, size: int) -> Iterator[UserBatch]:
    """(id, username) of ``users`` above ``after_id`` in id order, ``size`` at a
    time (keyset on the primary key: each batch is one indexed range query)."""
    rows = users.order_by("pk")
    cursor = after_id
    while batch := [
        (int(pk), str(name)) for pk, name in rows.filter(pk__gt=cursor).values_list("pk", "username")[:size]
    ]:
        yield batch
        cursor = batch[-1][0]


def unread_scan(
    batches: Iterable[tuple[UserBatch, list[bool]]], *, after_id: int, limit: int, scan_limit: int
) -> tuple[UserBatch, int, bool]:
    """Walk batches of users with their read bits and keep those whose bit is 0:
    (up to ``limit`` of them, the last id looked at, whether the walk stopped
    before the end). It stops after ``scan_limit`` users too, so one page stays
    short when nearly everyone has read it; the caller resumes after the id."""
    found: UserBatch = []
    cursor, scanned = after_id, 0
    for batch, bits in batches:
        for (pk, username), read in zip(batch, bits, strict=True):
            cursor = pk
            if not read:
                found.append((pk, username))
                if len(found) == limit:
                    return found, cursor, True
        scanned += len(batch)
        if scanned >= scan_limit:
            return found, cursor, True
    return found, cursor, False
