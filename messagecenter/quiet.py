"""Quiet hours: a daily span of wall-clock time in the user's own time zone
during which no push and no e-mail (other than digests) goes out.

The span is ``[start, end)`` on the user's clock and may span midnight
(22:00-07:00). Time zones come from the IANA database through ``zoneinfo``,
so a span keeps its wall-clock times across a DST change: a night of 22:00 to
07:00 lasts ten hours on the night the clocks go forward in spring (in
Europe) and eight in autumn. Two edges need a rule:

- an end that does not exist that day (inside the hour the clocks skip) ends
  the span when the clocks jump past it;
- an end that happens twice (the hour repeated in autumn) ends it the first time.

``start == end`` is an empty span: never quiet.
"""

import functools
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

# How finely the instant a skipped end time passes is looked for (the clocks
# of every zone jump on a whole minute).
_STEP = timedelta(minutes=1)


@functools.cache
def time_zones() -> frozenset[str]:
    """The IANA names this machine's zoneinfo knows (the only ones accepted)."""
    return frozenset(available_timezones())


def zone_of(name: str) -> ZoneInfo | None:
    """The zone of an IANA name, or None when it is not one (paths, junk)."""
    if name not in time_zones():
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def parse_hhmm(value: object) -> time | None:
    """``"HH:MM"`` (24-hour, two digits each) as a time; None for anything else."""
    if not isinstance(value, str) or len(value) != 5 or value[2] != ":":
        return None
    hours, minutes = value[:2], value[3:]
    if not (hours.isascii() and hours.isdigit() and minutes.isascii() and minutes.isdigit()):
        return None
    h, m = int(hours), int(minutes)
    if h > 23 or m > 59:
        return None
    return time(h, m)


def _wall(day: date, at: time, zone: ZoneInfo) -> datetime:
    """The first instant the clocks in ``zone`` show ``at`` on ``day`` or later
    that day: the wall time itself (its first occurrence when repeated), or,
    when the clocks skip it, the instant they jump past it."""
    local = datetime.combine(day, at, tzinfo=zone)  # fold=0: the first of a repeated time
    instant = local.astimezone(UTC)
    if instant.astimezone(zone).replace(tzinfo=None) == local.replace(tzinfo=None):
        return instant
    # Skipped: fold=0 reads it with the offset before the jump (an instant
    # after it), fold=1 with the one after (an instant before it); the jump
    # lies between, on a whole minute.
    early = local.replace(fold=1).astimezone(UTC)
    probe = early
    while probe < instant:
        probe += _STEP
        if probe.astimezone(zone).time() >= at:
            return probe
    return instant


@dataclass(frozen=True)
class QuietHours:
    start: time
    end: time
    zone: ZoneInfo

    @property
    def timezone(self) -> str:
        return str(self.zone.key)

    def _spans(self, around: datetime) -> list[tuple[datetime, datetime]]:
        """The spans (as UTC instants) that may hold ``around``: starting the
        local day before, that day and the day after."""
        today = around.astimezone(self.zone).date()
        spans = []
        for shift in (-1, 0, 1):
            day = today + timedelta(days=shift)
            begin = _wall(day, self.start, self.zone)
            end_day = day if self.start < self.end else day + timedelta(days=1)
            spans.append((begin, _wall(end_day, self.end, self.zone)))
        return spans

    def contains(self, instant: datetime) -> bool:
        if self.start == self.end:
            return False
        return any(begin <= instant < end for begin, end in self._spans(instant))

    def ends_after(self, instant: datetime) -> datetime | None:
        """When the span holding ``instant`` ends (UTC); None when it holds none."""
        if self.start == self.end:
            return None
        for begin, end in self._spans(instant):
            if begin <= instant < end:
                return end
        return None

    def as_dict(self) -> dict[str, str]:
        return {"start": self.start.strftime("%H:%M"), "end": self.end.strftime("%H:%M"), "timezone": self.timezone}


def quiet_hours_of(start: time | None, end: time | None, zone_name: str) -> QuietHours | None:
    """The stored columns as quiet hours; None when unset (or a zone this machine lost)."""
    if start is None or end is None or not zone_name:
        return None
    zone = zone_of(zone_name)
    return None if zone is None else QuietHours(start=start, end=end, zone=zone)
