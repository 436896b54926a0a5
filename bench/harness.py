"""Timing, result rows and the report table."""

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Stats:
    samples: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def p99(self) -> float:
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def measure(fn: Callable[[], Any], *, repeat: int, warmup: int = 3, setup: Callable[[], Any] | None = None) -> Stats:
    """Run ``fn`` ``warmup`` times unmeasured, then ``repeat`` times; seconds per call."""
    for _ in range(warmup):
        if setup:
            setup()
        fn()
    samples = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            if setup:
                setup()
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
    finally:
        if gc_was_enabled:
            gc.enable()
    return Stats(samples)


def once(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# How a report says a target was not met: one word, never softened.
MISSED = "MISSED"


@dataclass
class Row:
    """One line of the report: our figure next to the baseline's, same unit.

    ``better`` says which direction wins ("lower" for times and bytes,
    "higher" for rates); ``ratio`` is always "how many times better".
    """

    case: str
    measure: str
    ours: float
    unit: str
    baseline_name: str
    baseline: float | None
    better: str = "lower"
    p99: float | None = None
    baseline_p99: float | None = None
    target: float | None = None  # minimum ratio, when the measure has a goal
    at_least: float | None = None  # absolute floor for ours (rates)
    at_most: float | None = None  # absolute ceiling for ours (p99 when ``ceiling_on_p99``)
    ceiling_on_p99: bool = False
    trips: float | None = None  # Redis round trips per call, measured
    max_trips: int | None = None  # the most the hot path may spend
    failures: int | None = None  # failed requests (non-2xx, socket errors): any fails the row
    throttled: int | None = None  # requests answered 429: counted apart, any fails the row
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def timed(
        cls, case: str, measure: str, ours: Stats, baseline_name: str, theirs: dict[str, Any], **extra: Any
    ) -> "Row":
        """Our timings next to the incumbent's (its runner's ``median`` and ``p99``), in seconds."""
        return cls(
            case,
            measure,
            ours.median,
            "s",
            baseline_name,
            theirs["median"],
            p99=ours.p99,
            baseline_p99=theirs["p99"],
            **extra,
        )

    @property
    def ratio(self) -> float | None:
        if self.baseline is None or self.ours <= 0 or self.baseline <= 0:
            return None
        return self.baseline / self.ours if self.better == "lower" else self.ours / self.baseline

    def _checks(self) -> list[tuple[str, bool]]:
        """(the goal, whether this run meets it) for every target set."""
        checks = []
        if self.target is not None:
            checks.append((f"≥{_num(self.target)}x", self.ratio is not None and self.ratio >= self.target))
        if self.at_least is not None:
            checks.append((f"≥{fmt(self.at_least, self.unit)}", self.ours >= self.at_least))
        if self.at_most is not None:
            value = self.p99 if self.ceiling_on_p99 and self.p99 is not None else self.ours
            label = "p99 " if self.ceiling_on_p99 else ""
            checks.append((f"{label}≤{fmt(self.at_most, self.unit)}", value <= self.at_most))
        if self.max_trips is not None:
            trips = "round trip" if self.max_trips == 1 else "round trips"
            checks.append(
                (f"{self.max_trips} {trips} (is {_num(self.trips or 0)})", (self.trips or 0) <= self.max_trips)
            )
        if self.failures is not None:
            checks.append((f"no failed requests (is {self.failures:,})", self.failures == 0))
        if self.throttled is not None:
            checks.append((f"no 429s (is {self.throttled:,})", self.throttled == 0))
        return checks

    @property
    def verdict(self) -> str:
        checks = self._checks()
        if not checks:
            return ""
        return "met" if all(ok for _, ok in checks) else MISSED

    @property
    def target_text(self) -> str:
        checks = self._checks()
        if not checks:
            return ""
        return f"{', '.join(text for text, _ in checks)}: {self.verdict}"


def _num(value: float) -> str:
    return f"{value:,.0f}" if value >= 1 and value == int(value) else f"{value:,.2g}"


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        if value < 1e-3:
            return f"{value * 1e6:.0f} µs"
        if value < 1:
            return f"{value * 1e3:.2f} ms"
        return f"{value:.2f} s"
    if unit == "B":
        if value >= 1024 * 1024:
            return f"{value / 1024 / 1024:.1f} MiB"
        if value >= 1024:
            return f"{value / 1024:.1f} KiB"
        return f"{value:.2f} B"
    if unit == "/s":
        return f"{value:,.0f}/s"
    return f"{value:,.2f} {unit}".strip()


def table(rows: list[Row]) -> str:
    header = "| case | measure | ours (median) | ours p99 | baseline | baseline (median) | ratio | target |"
    lines = [header, "|" + " --- |" * 8]
    for r in rows:
        ratio = "-" if r.ratio is None else (f"{r.ratio:,.1f}x" if r.ratio >= 1 else f"{r.ratio:.2g}x")
        target = r.target_text
        lines.append(
            f"| {r.case} | {r.measure} | {fmt(r.ours, r.unit)} | {fmt(r.p99, r.unit)} | {r.baseline_name} "
            f"| {fmt(r.baseline, r.unit)} | {ratio} | {target} |"
        )
    notes = [f"- {r.case} / {r.measure}: {r.note}" for r in rows if r.note]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines)


class RoundTrips:
    """Counts a client's round trips. On a single Redis a command, a script
    call (redis-py's or core.lua's direct one), a pipeline or a stream takes
    one connection from the pool, once; on Redis Cluster (no such pool, and
    scripts go through redis-py) commands and pipeline executions are counted."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.pool = getattr(client, "connection_pool", None)
        self.count = 0

    def _counting(self, function: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return function(*args, **kwargs)

        return counted

    def __enter__(self) -> "RoundTrips":
        if self.pool is not None:
            self.pool.get_connection = self._counting(self.pool.get_connection)
            return self
        original_pipeline = self.client.pipeline

        def pipeline(*args: Any, **kwargs: Any) -> Any:
            pipe = original_pipeline(*args, **kwargs)
            pipe.execute = self._counting(pipe.execute)
            return pipe

        self.client.execute_command = self._counting(self.client.execute_command)
        self.client.pipeline = pipeline
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            del self.pool.get_connection
            return
        del self.client.execute_command
        del self.client.pipeline


# --- the cost-growth table ---------------------------------------------------------------


@dataclass
class GrowthRow:
    """How one cost grows with one dimension (live bulletins, items per user,
    user id, ...): the cost measured at each size, and the target it is held
    to. A case emits one by returning it among its rows (``run`` returns
    ``list[Row | GrowthRow]``); ``python -m bench`` collects them into the
    report's cost-growth table. Build one with ``ratio_within`` (the largest
    size's cost at most ``factor`` times the smallest's) or ``each_at_most``
    (every value under a ceiling), or give ``target`` and ``met`` directly."""

    case: str
    measure: str
    sizes: list[str]  # a label per size ("10 live", "10^9")
    values: list[float]  # the cost at each size, in ``unit``
    unit: str  # as for Row: "s", "B", "/s", or any other word
    target: str  # the goal in words
    met: bool
    note: str = ""

    def __post_init__(self) -> None:
        if len(self.sizes) != len(self.values) or not self.values:
            raise ValueError(f"{self.case} / {self.measure}: one value per size, at least one")

    @property
    def growth(self) -> float | None:
        """The last size's cost over the first's."""
        first, last = self.values[0], self.values[-1]
        return last / first if first > 0 else None

    @property
    def verdict(self) -> str:
        return "met" if self.met else MISSED

    @classmethod
    def ratio_within(
        cls, case: str, measure: str, sizes: list[str], values: list[float], unit: str, factor: float, note: str = ""
    ) -> "GrowthRow":
        first = values[0]
        met = first > 0 and max(values) <= factor * first
        return cls(case, measure, sizes, values, unit, f"≤{_num(factor)}x the {sizes[0]} cost", met, note)

    @classmethod
    def each_at_most(
        cls, case: str, measure: str, sizes: list[str], values: list[float], unit: str, ceiling: float, note: str = ""
    ) -> "GrowthRow":
        met = all(v <= ceiling for v in values)
        return cls(case, measure, sizes, values, unit, f"≤{fmt(ceiling, unit)} at every size", met, note)


def split_rows(rows: list[Any]) -> tuple[list[Row], list[GrowthRow]]:
    """A case's returned rows: the main table's and the cost-growth table's."""
    plain = [r for r in rows if isinstance(r, Row)]
    growth = [r for r in rows if isinstance(r, GrowthRow)]
    other = [r for r in rows if not isinstance(r, Row | GrowthRow)]
    if other:
        raise TypeError(f"a case returned rows of neither kind: {other!r}")
    return plain, growth


def growth_table(rows: list[GrowthRow]) -> str:
    header = "| case | measure | cost at each size | growth (last / first) | target |"
    lines = [header, "|" + " --- |" * 5]
    for r in rows:
        values = " · ".join(f"{size}: {fmt(value, r.unit)}" for size, value in zip(r.sizes, r.values, strict=True))
        growth = "-" if r.growth is None else f"{r.growth:,.2f}x"
        lines.append(f"| {r.case} | {r.measure} | {values} | {growth} | {r.target}: {r.verdict} |")
    notes = [f"- {r.case} / {r.measure}: {r.note}" for r in rows if r.note]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines)
