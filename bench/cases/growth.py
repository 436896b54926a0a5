"""Read cost as a user's inbox grows: a page (plain and unread-only, 90% of
the items read) at 10 / 10,000 / 100,000 items pushed per user, several users
taken in turn with no read cache, and what the largest single Redis script
call costs while items arrive at a full inbox and when an inbox written
without caps on write (100,000 items) is read for the first time.

Self-contained: items go straight through the read model's fan-out
(``publish.inbox_deliver``, details through ``item_detail_put``), so no
PostgreSQL rows are needed. Every Lua call is timed from the client (one
round trip each, so each figure includes the network's ~0.1 ms).
"""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.test import override_settings

from bench import data
from bench.harness import Row, Stats
from core.lua import LuaScript
from core.redis import get_redis
from messagecenter import keys as mc_keys
from messagecenter.readmodel import InboxEntry, inbox, publish
from messagecenter.readmodel.entries import CATEGORY_ORDER

MONTH = 202611
T0 = 1_795_000_000_000  # ms, in November 2026
NOW = T0 + 10**9
USERS = 4  # per size: each measured page goes to the next one (cold: no read cache, another user's keys)
PAGES = 200  # measured pages per (size, kind)
READ_SHARE = 0.9


def _entry(i: int) -> InboxEntry:
    return InboxEntry(
        ref=f"m{i}", category=CATEGORY_ORDER[i % len(CATEGORY_ORDER)], month=MONTH, offset=i, score=T0 + i, expire_ms=0
    )


def _redis_cpu() -> float:
    """Seconds of CPU Redis's main thread has used so far (user + system).

    What a call costs Redis in work: unlike wall time, it does not grow when
    the kernel takes the core from Redis in the middle of a call, which on
    two cores shared with this client and PostgreSQL happens every few
    thousand calls and makes even an HGET look like milliseconds. The
    difference between two readings also holds one INFO's own cost
    (``_cpu_floor``)."""
    info = get_redis().info("cpu")
    return float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])


def _cpu_floor(samples: int = 200) -> float:
    """Redis's CPU between two readings with nothing in between (the median):
    what every per-call CPU figure holds besides the call."""
    deltas = []
    for _ in range(samples):
        before = _redis_cpu()
        deltas.append(_redis_cpu() - before)
    return Stats(deltas).median


@contextmanager
def _timed_calls(cpu: list[float] | None = None) -> Iterator[list[float]]:
    """Every LuaScript call (a direct call or a streamed batch) and its seconds,
    client side; with ``cpu``, also each call's CPU on Redis's main thread
    (read before and after it, outside the timed part)."""
    seen: list[float] = []
    call, stream = LuaScript.__call__, getattr(LuaScript, "stream", None)

    def timed(run: Any, *args: Any, **kwargs: Any) -> Any:
        used = _redis_cpu() if cpu is not None else 0.0
        start = time.perf_counter()
        try:
            return run(*args, **kwargs)
        finally:
            seen.append(time.perf_counter() - start)
            if cpu is not None:
                cpu.append(_redis_cpu() - used)

    def timed_call(self: LuaScript, *args: Any, **kwargs: Any) -> Any:
        return timed(call, self, *args, **kwargs)

    def timed_stream(self: LuaScript, *args: Any, **kwargs: Any) -> Any:
        return timed(stream, self, *args, **kwargs)

    LuaScript.__call__ = timed_call  # type: ignore[method-assign]
    if stream is not None:
        LuaScript.stream = timed_stream  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        LuaScript.__call__ = call  # type: ignore[method-assign]
        if stream is not None:
            LuaScript.stream = stream  # type: ignore[method-assign]


def _fill(user_ids: list[int], items: int, *, first: int = 0, cpu: list[float] | None = None) -> list[float]:
    """Push ``items`` items to every user (each call one item to all of them), 90% of them
    read beforehand (their read bits set, as a reader who keeps up); the deliveries' times
    (and with ``cpu`` each delivery's CPU on Redis's main thread, ``_redis_cpu``)."""
    client = get_redis()
    pipe = client.pipeline(transaction=False)
    for i in range(first, first + items):
        if i % 10 < READ_SHARE * 10:
            for user_id in user_ids:
                pipe.setbit(mc_keys.read_bitmap(user_id, MONTH), i, 1)
        if len(pipe) >= 5000:
            pipe.execute()
    pipe.execute()
    times = []
    for i in range(first, first + items):
        entry = _entry(i)
        publish.item_detail_put(
            ref=entry.ref, detail={"member": entry.member, "title": "t", "category": entry.category}
        )
        used = _redis_cpu() if cpu is not None else 0.0
        start = time.perf_counter()
        publish.inbox_deliver(entry=entry, user_ids=user_ids, now_ms=T0)
        times.append(time.perf_counter() - start)
        if cpu is not None:
            cpu.append(_redis_cpu() - used)
    return times


def _pages(user_ids: list[int], *, unread_only: bool) -> Stats:
    samples = []
    for n in range(PAGES):
        user_id = user_ids[n % len(user_ids)]
        start = time.perf_counter()
        page = data.first_page(user_id, now_ms=NOW, unread_only=unread_only)
        samples.append(time.perf_counter() - start)
        assert isinstance(page, inbox.Page)
        assert len(page.rows) == 20, "a page of 20 was expected"
    return Stats(samples)


def _largest(times: list[float]) -> float:
    return max(times) if times else 0.0


def _slowlog_mark() -> int:
    """The newest slow log entry's id (-1: none): what a section's reading starts after."""
    entries = get_redis().slowlog_get(1)
    return int(entries[0]["id"]) if entries else -1


def _server_largest(after: int) -> str:
    """The largest script call Redis itself logged since ``after`` (its own clock: no network,
    no client scheduling), or the log's threshold when none took that long."""
    client = get_redis()
    threshold = int(client.config_get("slowlog-log-slower-than").get("slowlog-log-slower-than", 10_000))
    longest = [
        int(e["duration"])
        for e in client.slowlog_get(100_000)
        if int(e["id"]) > after and bytes(e["command"]).split(b" ", 1)[0].upper() in (b"EVALSHA", b"EVAL")
    ]
    if longest:
        return f"largest server-side script call {max(longest) / 1e3:.2f} ms ({len(longest):,} over {threshold} µs)"
    return f"no server-side script call over the slow log's {threshold} µs"


ScriptHistogram = dict[int, int]  # latency bucket's upper bound (µs) -> calls that took at most that


def _script_histogram() -> ScriptHistogram:
    """Redis's own latency histogram of script calls (EVALSHA and EVAL): the
    calls of each power-of-two bucket of microseconds, counted on the
    server's clock (no network, no client scheduling) and cumulative.
    Reading it changes no setting of the shared Redis."""
    reply = get_redis().execute_command("LATENCY", "HISTOGRAM", "evalsha", "eval")
    commands = [{int(b): int(c) for b, c in stats[b"histogram_usec"].items()} for stats in reply.values()]

    def at_most(histogram: ScriptHistogram, bound: int) -> int:
        # Each command's buckets stop at its slowest call: past it, all its calls.
        return max((calls for b, calls in histogram.items() if b <= bound), default=0)

    # Summed bound by bound over both commands' buckets (one slow EVAL long ago
    # has a bucket EVALSHA lacks), so the sum stays cumulative.
    bounds = sorted({b for histogram in commands for b in histogram})
    return {bound: sum(at_most(h, bound) for h in commands) for bound in bounds}


def _server_bound(before: ScriptHistogram, after: ScriptHistogram) -> tuple[float, str]:
    """The largest script call made between the two readings, as the bound
    of its bucket (seconds), and what the buckets say of it."""
    bounds = sorted(after)

    def made(bound: int) -> int:  # calls between the readings that took at most ``bound`` µs
        # A bucket missing from a reading holds every call below it.
        return after[bound] - max((v for b, v in before.items() if b <= bound), default=0)

    total = made(bounds[-1]) if bounds else 0
    if not total:
        return 0.0, "no script call between the readings"
    top = next(b for b in bounds if made(b) == total)
    below = max((b for b in bounds if b < top), default=0)
    over = total - (made(below) if below else 0)
    return (
        top / 1e6,
        f"{total:,} script calls; the largest took {below:,}-{top:,} µs on Redis's clock ({over:,} in that bucket; "
        "wall time on the server, so a Redis the shared cores' other processes preempted mid-call counts it too)",
    )


def run(*, users: int, quick: bool) -> list[Row]:
    client = get_redis()
    client.flushdb()
    big = 20_000 if quick else 100_000
    rows: list[Row] = []
    plain: dict[int, Stats] = {}
    unread: dict[int, Stats] = {}
    next_user = iter(range(900_000_000, 1_000_000_000))
    calls_at_cap: list[float] = []
    cpu_at_cap: list[float] = []
    floor = _cpu_floor()
    server_at_cap = ""
    bound_at_cap = (0.0, "")
    for size in (10, 10_000, big):
        ids_ = [next(next_user) for _ in range(USERS)]
        # Not 10 items: 200 (a page of 20 unread needs 200 items at 90% read); the 10 row pages all 10.
        pushed = 200 if size == 10 else size
        mark = _slowlog_mark()
        histogram = _script_histogram()
        cpu: list[float] | None = [] if size == big else None
        with _timed_calls():
            times = _fill(ids_, pushed, cpu=cpu)
        if size == big:
            server_at_cap = _server_largest(mark)
            bound_at_cap = _server_bound(histogram, _script_histogram())
            cap = int(settings.MESSAGECENTER_INBOX_MAX_ITEMS)
            calls_at_cap = times[cap:]
            cpu_at_cap = (cpu or [])[cap:]
        for user_id in ids_:  # settled once (the first read of a fresh inbox), then measured
            inbox.inbox_counts(user_id=user_id, now_ms=NOW)
        plain[size] = _pages(ids_, unread_only=False)
        unread[size] = _pages(ids_, unread_only=True)
        label = f"{size:,} items pushed per user" if size != 10 else "200 items per user"
        held = client.zcard(mc_keys.inbox(ids_[0]))
        for kind, stats in (("plain", plain[size]), ("unread-only, 90% read", unread[size])):
            rows.append(
                Row(
                    "inbox growth",
                    f"page of 20, {kind}, {label} ({held:,} held)",
                    stats.median,
                    "s",
                    "-",
                    None,
                    p99=stats.p99,
                )
            )
    ratio_row = Row(
        "inbox growth",
        "unread-only page vs plain page at 10,000 items, 90% read (ratio: plain / unread-only)",
        unread[10_000].median,
        "s",
        "plain page",
        plain[10_000].median,
        p99=unread[10_000].p99,
        baseline_p99=plain[10_000].p99,
        target=1 / 1.5,
        note="target: the unread-only page within 1.5x of the plain page",
    )
    rows.append(ratio_row)
    growth = Row(
        "inbox growth",
        f"unread-only page at {big:,} vs 10 items pushed (ratio: 10 / {big:,})",
        unread[big].median,
        "s",
        "unread-only page at 200 items",
        unread[10].median,
        p99=unread[big].p99,
        baseline_p99=unread[10].p99,
        target=1 / 1.5,
    )
    rows.append(growth)
    at_cap = Stats(calls_at_cap)
    rows.append(
        Row(
            "inbox growth",
            f"delivery to {USERS} users at the cap (one fan-out call, {len(calls_at_cap):,} calls): largest call",
            _largest(calls_at_cap),
            "s",
            "-",
            None,
            p99=at_cap.p99,
            at_most=0.005,
            note=f"median {at_cap.median * 1e3:.2f} ms; {server_at_cap}; client-side times on a shared 2-core "
            "machine, so the largest includes scheduling noise",
        )
    )
    rows.append(
        Row(
            "inbox growth",
            f"delivery of {big:,} items to {USERS} users each (up to the cap and past it): largest script call "
            "on Redis's clock (its latency histogram)",
            bound_at_cap[0],
            "s",
            "-",
            None,
            at_most=0.005,
            note=f"{bound_at_cap[1]}; the value is the bucket's upper bound",
        )
    )

    rows.append(
        _cpu_row(f"delivery to {USERS} users at the cap ({len(cpu_at_cap):,} fan-out calls)", cpu_at_cap, floor)
    )

    # --- an inbox written without caps on write: 100,000 items, then its first read --------
    legacy = [next(next_user) for _ in range(2)]
    with override_settings(MESSAGECENTER_INBOX_MAX_ITEMS=10**9):
        _fill(legacy, big)
    held = client.zcard(mc_keys.inbox(legacy[0]))
    mark = _slowlog_mark()
    histogram = _script_histogram()
    cpu_first_read: list[float] = []
    with _timed_calls(cpu=cpu_first_read) as calls:
        start = time.perf_counter()
        inbox.inbox_counts(user_id=legacy[0], now_ms=NOW)
        first_read = time.perf_counter() - start
    bound_first_read = _server_bound(histogram, _script_histogram())
    rows.append(
        Row(
            "inbox growth",
            f"first read of an inbox holding {held:,} items (cap {settings.MESSAGECENTER_INBOX_MAX_ITEMS:,}): "
            "largest script call",
            _largest(calls),
            "s",
            "-",
            None,
            at_most=0.005,
            note=f"{len(calls):,} script calls, {first_read * 1e3:.0f} ms in all; {_server_largest(mark)}; "
            f"{client.zcard(mc_keys.inbox(legacy[0])):,} items held after",
        )
    )
    rows.append(
        Row(
            "inbox growth",
            f"first read of an inbox holding {held:,} items: largest script call on Redis's clock "
            "(its latency histogram)",
            bound_first_read[0],
            "s",
            "-",
            None,
            at_most=0.005,
            note=f"{bound_first_read[1]}; the value is the bucket's upper bound",
        )
    )
    rows.append(
        _cpu_row(f"first read of an inbox holding {held:,} items ({len(calls):,} script calls)", cpu_first_read, floor)
    )
    return rows


def _cpu_row(what: str, cpu: list[float], floor: float) -> Row:
    """The largest of these calls by the work it made Redis do: its main
    thread's CPU across the call (``_redis_cpu``), the target the same
    ceiling as the wall-time rows'."""
    stats = Stats(cpu)
    largest = _largest(cpu)
    over = sum(1 for c in cpu if c > 0.001)
    return Row(
        "inbox growth",
        f"{what}: largest call's CPU on Redis's main thread",
        largest,
        "s",
        "-",
        None,
        p99=stats.p99,
        at_most=0.005,
        note=f"median {stats.median * 1e6:.0f} µs, {over:,} over 1 ms; read from INFO cpu before and after each "
        f"call, so each figure also holds one INFO's cost (median {floor * 1e6:.0f} µs with no call between); "
        "CPU time, not wall time: the kernel preempting Redis mid-call does not count; Redis's own work between "
        "the readings (its cron: incremental rehashing, expiry) and other clients' commands would",
    )
