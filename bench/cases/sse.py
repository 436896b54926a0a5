"""Live event streams on one uvicorn process, as ``bench.sse_load`` measures
them (the server and this client on the same two cores, over loopback): how
many open, what each costs the process (memory, Redis and PostgreSQL
connections), and how long an event takes to reach its streams (a user's
own event, and a broadcast every stream hears: to each stream's socket, by
the kernel's receive stamp, and as this client reads it), next to the
machine's floor for that broadcast (the same streams on a bare server of
one thread, ``sse_load.floor``). A full run opens 1,000 and then 10,000
streams; ``--quick`` only 1,000.
"""

from typing import Any

from django.conf import settings

from bench import sse_load
from bench.harness import GrowthRow
from core.redis import get_redis

CASE = "live streams"
FULL_SIZES = (1_000, 10_000)
QUICK_SIZES = (1_000,)
CAPACITY = 10_000  # streams one process must hold
STREAM_BYTES = 20 * 1024  # the most a stream may cost the process
DELAY = 0.1  # p99 of a user's event's delay, seconds
# p99 of a broadcast's delay to every stream's socket, seconds: each of its
# bytes goes through Django's streaming response and the server's ASGI send.
BROADCAST_DELAY = 0.15
# A user's events per size (one at a time, 10 ms apart) and broadcasts.
EVENTS = 300
BROADCASTS = 3


def _label(streams: int) -> str:
    return f"{streams:,} streams"


def _p(values: list[float], q: float) -> float:
    return sse_load.quantile(values, q)


def _rows(results: list[dict[str, Any]]) -> list[GrowthRow]:
    sizes = [_label(r["asked"]) for r in results]
    largest = results[-1]
    opened = [float(r["open"]) for r in results]
    failed = sum(r["failures"] for r in results)
    # A quick run asks for fewer than CAPACITY: it checks only that every stream opened.
    capacity_met = failed == 0 and all(r["open"] == r["asked"] for r in results)
    if largest["asked"] >= CAPACITY:
        capacity_met = capacity_met and largest["open"] >= CAPACITY
    each = [(r["rss_after"] - r["rss_before"]) / max(1, r["open"] - r["first"]) for r in results]
    user_p99 = [_p(r["user_delays"], 0.99) for r in results]
    broadcast_p99 = [_p(r["broadcast_delays"], 0.99) for r in results]
    floor_p99 = [_p(r["floor_delays"], 0.99) for r in results]
    read_p99 = [_p(r["read_delays"], 0.99) for r in results]
    cpu = [min(u + k for u, k in r["broadcast_cpu"]) for r in results]
    hubs = [float(r["redis_after"][0]) for r in results]
    redis_each = [(r["redis_after"][2] - r["redis_before"][2]) / max(1, r["open"] - r["first"]) for r in results]
    pg = [float(r["pg_count"]) for r in results]

    def per_size(text: Any) -> str:
        return "; ".join(f"{label}: {text(r)}" for label, r in zip(sizes, results, strict=True))

    return [
        GrowthRow(
            CASE,
            "streams open on one uvicorn process (one worker)",
            sizes,
            opened,
            "streams",
            f"every stream asked for opens (≥{CAPACITY:,} asked in a full run)",
            capacity_met,
            note=per_size(
                lambda r: (
                    f"{r['open']:,} of {r['asked']:,} in {r['open_seconds']:.1f} s, {r['failures']} failed"
                    + "".join(f", {count} {kind}" for kind, count in sorted(r["failure_kinds"].items()))
                )
            ),
        ),
        GrowthRow.each_at_most(
            CASE,
            "bytes per stream (the process's RSS growth over the streams opened after the first tenth)",
            sizes,
            each,
            "B",
            STREAM_BYTES,
            note=per_size(
                lambda r: (
                    f"RSS {r['rss_before'] / 2**20:.0f} MiB at {r['first']:,} streams, "
                    f"{r['rss_after'] / 2**20:.0f} MiB at {r['open']:,}"
                )
            ),
        ),
        GrowthRow.each_at_most(
            CASE,
            "a user's event: delay to its stream, p99",
            sizes,
            user_p99,
            "s",
            DELAY,
            note=per_size(
                lambda r: (
                    f"p50 {_p(r['user_delays'], 0.5) * 1e3:.1f} ms, p99 {_p(r['user_delays'], 0.99) * 1e3:.1f} ms "
                    f"({len(r['user_delays'])} of {r['events']} arrived; published as a write does, one at a time)"
                )
            ),
        ),
        GrowthRow.each_at_most(
            CASE,
            "a broadcast: delay to every stream's socket, p99",
            sizes,
            broadcast_p99,
            "s",
            BROADCAST_DELAY,
            note=per_size(lambda r: sse_load.spread_text(r, "broadcast"))
            + ". Timed from the publish to the kernel's receive stamp on each stream's socket, this client "
            "asleep meanwhile (as browsers on other machines cost the server nothing to wake); on loopback "
            "each of the server's writes still runs the receiving side in the kernel. Against the floor "
            "(measured in the same run, the same way): "
            + per_size(lambda r: f"{_p(r['broadcast_delays'], 0.99) / _p(r['floor_delays'], 0.99):.2f}x its p99"),
        ),
        GrowthRow(
            CASE,
            "the same broadcast as this client reads it, p99 (its reading shares the server's two cores)",
            sizes,
            read_p99,
            "s",
            "-",
            True,
            note=per_size(lambda r: sse_load.spread_text(r, "read"))
            + ". The client reads every stream as its event comes, on the same two cores: its own work and the "
            "server's cost of waking it are part of these delays. The floor read the same way: "
            + per_size(lambda r: sse_load.spread_text(r, "floor_read")),
        ),
        GrowthRow(
            CASE,
            "the machine's floor for that broadcast: the same streams on a bare server of one thread "
            "(plain sockets, one loop of send() calls, no Django, ASGI or Redis), to each socket, p99",
            sizes,
            floor_p99,
            "s",
            "-",
            True,
            note=per_size(lambda r: sse_load.spread_text(r, "floor"))
            + ". What one thread writing each stream in turn gets out on this machine; ours queues the "
            "broadcast for every stream and each stream's task sends it through Django and ASGI send.",
        ),
        GrowthRow(
            CASE,
            "the server's CPU per broadcast to every stream (user + system, the cheapest of the broadcasts)",
            sizes,
            cpu,
            "s",
            "-",
            True,
            note=per_size(
                lambda r: ", ".join(
                    f"{(u + k) * 1e3:.0f} ms ({u * 1e3:.0f} + {k * 1e3:.0f})" for u, k in r["broadcast_cpu"]
                )
            ),
        ),
        GrowthRow.each_at_most(
            CASE,
            "Redis pub/sub connections of the process, streams open",
            sizes,
            hubs,
            "connections",
            1,
            note="the hub's named connection in CLIENT LIST, one per process however many streams",
        ),
        GrowthRow.each_at_most(
            CASE,
            "Redis connections per stream (the process's sockets to Redis, growth over the streams opened)",
            sizes,
            redis_each,
            "connections",
            0.01,
            note=per_size(lambda r: f"{r['redis_before'][2]} connections before, {r['redis_after'][2]} after"),
        ),
        GrowthRow.each_at_most(
            CASE,
            "PostgreSQL connections of the process, streams open",
            sizes,
            pg,
            "connections",
            settings.DATABASE_POOL_MAX_SIZE,
            note=per_size(lambda r: r["pg"])
            + " (pg_stat_activity by the server's client ports): a stream holds none; the pool keeps what the "
            "streams' first authentications opened, never more than its maximum, whatever the number of streams",
        ),
    ]


def run(*, users: int, quick: bool) -> list[GrowthRow]:
    get_redis().flushdb()
    results = []
    for streams in QUICK_SIZES if quick else FULL_SIZES:
        result = sse_load.measure(streams, events=EVENTS, broadcasts=BROADCASTS)
        result.update(sse_load.floor(streams, broadcasts=BROADCASTS))
        results.append(result)
    return _rows(results)
