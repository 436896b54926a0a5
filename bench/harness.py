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
        return checks

    @property
    def verdict(self) -> str:
        checks = self._checks()
        if not checks:
            return ""
        return "met" if all(ok for _, ok in checks) else "NOT met"

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
    scripts go through redis-py) commands and pipeline executions are counted.
    Round trips on core.tracking's connections (held answers) are added."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.pool = getattr(client, "connection_pool", None)
        self.count = 0
        self._held_from = 0

    def _counting(self, function: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return function(*args, **kwargs)

        return counted

    def __enter__(self) -> "RoundTrips":
        from core import tracking  # not at import: the incumbent's runner imports this module too

        self._held_from = tracking.round_trips[0]
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
        from core import tracking

        self.count += tracking.round_trips[0] - self._held_from
        if self.pool is not None:
            del self.pool.get_connection
            return
        del self.client.execute_command
        del self.client.pipeline
