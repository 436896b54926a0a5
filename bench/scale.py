"""The scale run: ``python -m bench.scale [--users N] [--entries N]`` (``make bench-scale``).

Starts a private redis-server on a spare port (never the machine's shared
one), fills it through the read model's own write path with ``--users``
users and ``--entries`` inbox entries, then measures what the capacity plan
needs: Redis memory per user and per entry (INFO memory, MEMORY USAGE of a
sample of users' keys), first-page and counts latency for sampled users
(cold: the first read after the fill; warm: the same read again), and the
fill rate, which is what one fan-out worker sustains. Writes bench/SCALE.md
and stops the private Redis by its PID whatever happens.

The fill is the production path, not hand-made keys: every item's detail goes
in through ``publish.item_detail_put``, every entry through
``publish.inbox_deliver`` (deliver.lua, calls streamed in batches), the
broadcasts through ``publish.pull_register`` and ``publish.bulletin_put``.
PostgreSQL is not involved: the rows a real send writes first are not what
this run sizes.
"""

import argparse
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import data
from messagecenter import keys as mc_keys

ROOT = Path(__file__).resolve().parent.parent
CATEGORIES = ("system", "promotion", "transaction", "interaction")

# Who gets how much: (share of users, share of entries). Most users hold a
# few items, a tenth some dozens, one in a hundred a hundred or more.
TIERS = (("light", 0.90, 0.45), ("medium", 0.09, 0.45), ("heavy", 0.01, 0.10))
# Entries that go to one user each (a receipt, a direct reply): each is an
# item of its own, so it also moves the month's item count.
SINGLE_SHARE = 0.001


@dataclass(frozen=True)
class Tier:
    name: str
    low: int  # first user id
    high: int  # last user id
    entries: int


@dataclass(frozen=True)
class Item:
    """One item of the fill and who gets it: ``recipients`` users drawn from ``tier``."""

    ref: str
    category: str
    month: int
    offset: int
    score: int  # ms
    tier: str
    recipients: int


@dataclass
class Plan:
    users: int
    entries: int
    batch: int
    tiers: list[Tier]
    items: list[Item] = field(default_factory=list)

    def months(self) -> dict[int, int]:
        """Items per month (each month's offsets run 0 .. count - 1)."""
        counts: dict[int, int] = {}
        for item in self.items:
            counts[item.month] = counts.get(item.month, 0) + 1
        return counts


def _month(ms: int) -> int:
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.year * 100 + moment.month


def plan_fill(*, users: int, entries: int, batch: int, now_ms: int, days: int = 45, seed: int = 17) -> Plan:
    """Which items go to how many users of which tier, in time order.

    Group items of ``batch`` recipients carry almost every entry; a
    ``SINGLE_SHARE`` of entries are items with one recipient. Items are spread
    over ``days`` up to ``now_ms`` and get dense per-month offsets in time
    order, as ``slot_allocate`` hands them out.
    """
    if users < 100 or entries < users // 10 or batch < 1:
        raise ValueError("the plan needs at least 100 users, entries ≥ users / 10 and a positive batch")
    rng = random.Random(seed)
    tiers: list[Tier] = []
    first = 1
    singles = int(entries * SINGLE_SHARE)
    grouped = entries - singles
    for index, (name, user_share, entry_share) in enumerate(TIERS):
        count = users - first + 1 if index == len(TIERS) - 1 else int(users * user_share)
        tiers.append(Tier(name, first, first + count - 1, int(grouped * entry_share)))
        first += count
    # What rounding left goes to the lightest tier.
    short = grouped - sum(t.entries for t in tiers)
    tiers[0] = Tier(tiers[0].name, tiers[0].low, tiers[0].high, tiers[0].entries + short)
    drafts: list[tuple[str, int]] = []  # (tier, recipients)
    for tier in tiers:
        size = min(batch, tier.high - tier.low + 1)
        full, rest = divmod(tier.entries, size)
        drafts += [(tier.name, size)] * full
        if rest:
            drafts.append((tier.name, rest))
    drafts += [("single", 1)] * singles
    rng.shuffle(drafts)
    span = days * 86_400_000
    scores = sorted(rng.randrange(now_ms - span, now_ms - 60_000) for _ in drafts)
    offsets: dict[int, int] = {}
    plan = Plan(users=users, entries=entries, batch=batch, tiers=tiers)
    for number, ((tier_name, recipients), score) in enumerate(zip(drafts, scores, strict=True), start=1):
        month = _month(score)
        offset = offsets.get(month, 0)
        offsets[month] = offset + 1
        plan.items.append(Item(f"m{number}", CATEGORIES[number % 4], month, offset, score, tier_name, recipients))
    return plan


def recipients_of(plan: Plan, item: Item, rng: random.Random) -> list[int]:
    """The users an item goes to: distinct ids of its tier (any user for a single)."""
    if item.tier == "single":
        return [rng.randint(1, plan.users)]
    tier = next(t for t in plan.tiers if t.name == item.tier)
    return rng.sample(range(tier.low, tier.high + 1), item.recipients)


def fill(plan: Plan, *, now_ms: int, seed: int = 21, progress: bool = False) -> dict[str, float]:
    """Write the plan through the read model's write path; returns timings and counts."""
    from messagecenter.readmodel import InboxEntry, publish

    rng = random.Random(seed)
    detail_seconds = deliver_seconds = 0.0
    delivered = 0
    started = time.perf_counter()
    last = started
    for index, item in enumerate(plan.items):
        entry = InboxEntry(item.ref, item.category, item.month, item.offset, item.score)
        detail = {
            "title": f"Item {item.ref}",
            "summary": "A scale-run item with a summary of ordinary length for a list row.",
            "body_html": "<p>A scale-run item.</p>",
            "images": [],
            "link": "",
        }
        user_ids = recipients_of(plan, item, rng)
        t0 = time.perf_counter()
        publish.item_detail_put(ref=item.ref, detail=detail)
        t1 = time.perf_counter()
        delivered += publish.inbox_deliver(entry=entry, user_ids=user_ids, now_ms=now_ms)
        t2 = time.perf_counter()
        detail_seconds += t1 - t0
        deliver_seconds += t2 - t1
        if progress and t2 - last > 15:
            last = t2
            print(
                f"   {index + 1:,}/{len(plan.items):,} items, {delivered:,} entries, "
                f"{delivered / deliver_seconds:,.0f} entries/s",
                flush=True,
            )
    return {
        "seconds": time.perf_counter() - started,
        "deliver_seconds": deliver_seconds,
        "detail_seconds": detail_seconds,
        "delivered": delivered,
    }


BROADCASTS = 3  # messages to everyone (stored once, merged on read)
BULLETINS = 3  # bulletins to everyone (merged on read)


def broadcasts(plan: Plan, *, now_ms: int) -> None:
    """A few messages to everyone and bulletins, each stored once: every
    user's first read merges them (the cold reads below pay for it)."""
    from messagecenter.readmodel import InboxEntry, publish

    month = _month(now_ms)
    offset = plan.months().get(month, 0)
    for i in range(BROADCASTS + BULLETINS):
        score = now_ms - 30_000 + i
        detail = {"title": f"To everyone {i}", "summary": "", "body_html": "<p>All.</p>", "images": [], "link": ""}
        if i < BROADCASTS:
            entry = InboxEntry(f"m{len(plan.items) + i + 1}", "system", month, offset + i, score)
            publish.pull_register(entry=entry, detail=detail, audience=None)
        else:
            bulletin_id = i - BROADCASTS + 1
            entry = InboxEntry(f"b{bulletin_id}", "system", month, offset + i, score)
            publish.bulletin_put(
                bulletin_id=bulletin_id, entry=entry, detail=detail, group_ids=[], now_ms=now_ms, edit=False
            )


# --- measuring ---------------------------------------------------------------------------


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _timed(fn: Any, *args: Any) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def reads(plan: Plan, *, now_ms: int, sample: int, seed: int = 5) -> dict[str, dict[str, float]]:
    """First page (the one GET /api/v1/inbox/ asks for, with its counts) and
    the counts alone, each cold (the user's first read since the fill: the
    merge of the broadcasts and no read cache) and warm (again), over
    ``sample`` users spread across the tiers; disjoint users for each."""
    from messagecenter.readmodel import inbox

    rng = random.Random(seed)
    per_tier = max(1, sample // len(plan.tiers))
    page_users: list[int] = []
    count_users: list[int] = []
    for tier in plan.tiers:
        chosen = rng.sample(range(tier.low, tier.high + 1), min(2 * per_tier, tier.high - tier.low + 1))
        page_users += chosen[: len(chosen) // 2]
        count_users += chosen[len(chosen) // 2 :]
    field_name = "|0|20"  # the first page's read-cache field, as the selector names it

    def page(user_id: int) -> None:
        result = data.first_page(user_id, now_ms=now_ms, cache_field=field_name)
        tag = getattr(result, "cache_tag", None)
        if tag is not None:  # what the view does after rendering: keep the rendering
            inbox.page_cache_put(user_id=user_id, field=field_name, tag=tag, body=b"{}")

    def counts(user_id: int) -> None:
        inbox.inbox_counts(user_id=user_id, now_ms=now_ms)

    out: dict[str, dict[str, float]] = {}
    for name, users, fn in (("page", page_users, page), ("counts", count_users, counts)):
        cold = [_timed(fn, u) for u in users]
        warm = [_timed(fn, u) for u in users]
        for label, samples in (("cold", cold), ("warm", warm)):
            out[f"{name} {label}"] = {
                "users": len(samples),
                "p50": statistics.median(samples),
                "p99": _quantile(samples, 0.99),
                "max": max(samples),
            }
    return out


def per_user_bytes(plan: Plan, client: Any, *, sample: int, seed: int = 9) -> dict[str, Any]:
    """MEMORY USAGE of every key of sampled users per tier, and a least-squares
    split into a fixed cost per user and a cost per entry. The users' keys are
    found by one SCAN over the whole keyspace matched on their hash tags
    client-side, so any key kind the read model adds later is counted too."""
    from core import keys

    rng = random.Random(seed)
    chosen: dict[str, str] = {}  # hash tag -> tier
    ids: dict[str, int] = {}
    for tier in plan.tiers:
        for user_id in rng.sample(range(tier.low, tier.high + 1), min(sample, tier.high - tier.low + 1)):
            tag = keys.user_tag(user_id)
            chosen[tag], ids[tag] = tier.name, user_id
    found: dict[str, list[bytes]] = {tag: [] for tag in chosen}
    for name in client.scan_iter(count=20_000):
        start = name.find(b"{u")
        if start >= 0:
            tag = name[start : name.find(b"}", start) + 1].decode()
            if tag in found:
                found[tag].append(name)
    rows: list[tuple[str, int, int, int]] = []  # tier, entries, keys, bytes
    for tag, names in found.items():
        items = int(client.zcard(mc_keys.inbox(ids[tag])))
        total = sum(int(client.memory_usage(n, samples=0) or 0) for n in names)
        rows.append((chosen[tag], items, len(names), total))
    # The split holds only between users holding the same keys: a user with
    # more kinds of keys (unread zsets, groups) pays their fixed costs too,
    # which a line through everyone would count per entry (and could push
    # the fixed cost below zero). So the users with the fewest keys.
    fewest = min(r[2] for r in rows)
    alike = [r for r in rows if r[2] == fewest]
    xs = [r[1] for r in alike]
    ys = [r[3] for r in alike]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    by_tier = {}
    for tier in plan.tiers:
        mine = [r for r in rows if r[0] == tier.name]
        by_tier[tier.name] = {
            "users": len(mine),
            "items": statistics.fmean(r[1] for r in mine),
            "keys": statistics.fmean(r[2] for r in mine),
            "bytes": statistics.fmean(r[3] for r in mine),
        }
    return {
        "by_tier": by_tier,
        "fixed": mean_y - slope * mean_x,
        "per_entry": slope,
        "sampled": len(rows),
        "fitted": len(alike),
        "fit_keys": fewest,
    }


def keep_active(plan: Plan, *, share: float, seed: int = 13) -> int:
    """Drop the parts of all users but a random ``share`` of them, as the idle job
    (``fill.inbox_idle_drop``) leaves Redis once they stop reading: what Redis
    holds when that share of the users came back within the idle time. The
    shared keys (item details, broadcasts, bulletins) stay. Returns how many
    users' parts were dropped."""
    from messagecenter.readmodel.user_part import user_part_drop

    rng = random.Random(seed)
    dropped = 0
    for user_id in range(1, plan.users + 1):
        if rng.random() >= share:
            user_part_drop(user_id=user_id, group_keys=())
            dropped += 1
    return dropped


# --- the private Redis ------------------------------------------------------------------


def _free_port(preferred: int) -> int:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])


@contextmanager
def private_redis(port: int) -> Iterator[tuple[str, int]]:
    """A redis-server of this run only (no persistence), stopped by its PID."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is missing")
    workdir = tempfile.mkdtemp(prefix="bench-scale-redis-")
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    command += ["--dir", workdir, "--daemonize", "no", "--logfile", str(Path(workdir) / "redis.log")]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        url = f"redis://127.0.0.1:{port}/0"
        import redis

        probe = redis.Redis.from_url(url)
        for _ in range(100):
            try:
                probe.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"the private redis-server on port {port} did not answer")
        probe.close()
        yield url, process.pid
    finally:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


# --- the report ---------------------------------------------------------------------------


def _mib(value: float) -> str:
    return f"{value / 1024 / 1024:,.1f} MiB"


def _ms(value: float) -> str:
    return f"{value * 1e3:.2f} ms"


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    return (done.stdout.strip() or "unknown") + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def report(
    *,
    plan: Plan,
    args: argparse.Namespace,
    filled: dict[str, float],
    memory: dict[str, dict[str, Any]],
    sizes: dict[str, Any] | None,
    latency: dict[str, dict[str, float]] | None,
    server: str,
    total_seconds: float,
    missing: list[str],
) -> str:
    empty, loaded = memory["empty"], memory["loaded"]
    used = int(loaded["used_memory"]) - int(empty["used_memory"])
    full = args.users == 1_000_000 and args.entries == 10_000_000
    tiers = "; ".join(
        f"{t.name}: users {t.low:,}-{t.high:,} ({t.high - t.low + 1:,}), {t.entries:,} entries "
        f"(~{t.entries / (t.high - t.low + 1):.0f} each)"
        for t in plan.tiers
    )
    months = ", ".join(f"{m}: {n:,} items" for m, n in sorted(plan.months().items()))
    rate = filled["delivered"] / filled["deliver_seconds"]
    lines = [
        "# Scale run",
        "",
        f"- date: {datetime.now(UTC).isoformat(timespec='seconds')}, commit {_commit()}",
        f"- machine: {os.cpu_count()} cores shared with other work (load average {args.load_at_start:.1f} at the "
        f"start, {os.getloadavg()[0]:.1f} at the end; below 1 when idle), {server}",
        f"- command: `make bench-scale` (`python -m bench.scale --users {args.users:,} --entries {args.entries:,}`)",
        f"- size: **{args.users:,} users, {filled['delivered']:,.0f} inbox entries**"
        + (
            ""
            if full
            else " — a SMALLER run than the target of 1,000,000 users and 10,000,000 entries; "
            "every figure below is from this size"
        ),
        f"- mix: {tiers}; {sum(1 for i in plan.items if i.tier == 'single'):,} single-recipient items; "
        f"{len(plan.items):,} items in all over {args.days} days ({months}); {BROADCASTS} messages to everyone and "
        f"{BULLETINS} bulletins, stored once and merged on each user's first read",
        "- path: item details through `publish.item_detail_put`, entries through `publish.inbox_deliver` "
        f"(deliver.lua, {args.batch:,} recipients per call of the service, streamed as script calls of "
        "`DELIVER_BATCH` recipients), broadcasts through `publish.pull_register` and `publish.bulletin_put`; "
        "a private redis-server (no persistence) on a spare port, stopped by PID after the run",
        f"- whole run {total_seconds:.0f} s",
        "",
        "## Memory",
        "",
        "| measure | value | how |",
        "| --- | --- | --- |",
        f"| used_memory after the fill | {_mib(int(loaded['used_memory']))} | INFO memory (empty server: "
        f"{_mib(int(empty['used_memory']))}; rss {_mib(int(loaded['used_memory_rss']))}, fragmentation ratio "
        f"{loaded['mem_fragmentation_ratio']}) |",
        f"| keys | {int(loaded['keys']):,} | DBSIZE |",
        f"| bytes per user (all Redis memory / users) | {used / args.users:,.0f} B | "
        "(used_memory after - empty) / users |",
        f"| bytes per entry (all Redis memory / entries) | {used / filled['delivered']:,.1f} B | "
        "(used_memory after - empty) / entries; details (stored once per item) included |",
    ]
    if "final" in memory:
        lines.append(
            f"| used_memory after the sampled reads | {_mib(int(memory['final']['used_memory']))} | the reads merged "
            "the broadcasts into the sampled inboxes and kept their read cache |"
        )
    if "active" in memory:
        active = int(memory["active"]["used_memory"]) - int(empty["used_memory"])
        lines.append(
            f"| used_memory with {args.active_share:.0%} of the users active | {_mib(int(memory['active']['used_memory']))}"
            f" ({active / used:.2f}x of all users') | every other user's part dropped as the idle job drops it "
            f"({memory['active']['dropped']:,} users), the shared keys kept: what Redis holds when "
            f"{args.active_share:.0%} of the users read within the idle time |"
        )
    if sizes is not None:
        lines += [
            f"| fixed bytes per user | {sizes['fixed']:,.0f} B | least squares of MEMORY USAGE over the keys of "
            f"the {sizes['fitted']} of {sizes['sampled']} sampled users holding the fewest keys ({sizes['fit_keys']} "
            "each; found by hash tag, other users than the timed readers) against their entries |",
            f"| bytes per additional entry | {sizes['per_entry']:,.1f} B | the slope of the same fit |",
            "",
            "| tier | sampled users | entries each (mean) | keys each | bytes each (MEMORY USAGE) |",
            "| --- | --- | --- | --- | --- |",
        ]
        for name, row in sizes["by_tier"].items():
            lines.append(
                f"| {name} | {row['users']} | {row['items']:,.1f} | {row['keys']:,.1f} | {row['bytes']:,.0f} B |"
            )
    lines += [
        "",
        "## Reads (read model calls behind GET /api/v1/inbox/ and GET /api/v1/inbox/counts/, in process)",
        "",
        "| read | users | p50 | p99 | max |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, row in (latency or {}).items():
        lines.append(f"| {name} | {row['users']:,} | {_ms(row['p50'])} | {_ms(row['p99'])} | {_ms(row['max'])} |")
    lines += [
        "",
        "Cold: the user's first read after the fill (no read cache; the three messages to everyone and three "
        "bulletins are merged in). Warm: the same read again (the read cache's check). The page and counts users "
        "are disjoint, spread evenly over the tiers.",
        "",
        "## Write rate",
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| fan-out, one process (entries/s while delivering) | {rate:,.0f}/s |",
        f"| fill, all included (details, deliveries) | {filled['delivered'] / filled['seconds']:,.0f} entries/s, "
        f"{filled['seconds']:.0f} s |",
        f"| fill time per million users at this mix | {filled['seconds'] / args.users * 1e6:,.0f} s |",
        "",
        "The fan-out rate is what one Celery worker process sustains on this machine (the same service call a "
        "delivery task makes), with Redis on the same 2 cores. A rebuild from PostgreSQL (durability/rebuild.py) was not "
        "timed: this run writes no PostgreSQL rows; the fill time per million users is the stand-in.",
        "",
    ]
    if missing:
        lines += ["## Not measured in this run", "", *(f"- {m}" for m in missing), ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale")
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--entries", type=int, default=10_000_000)
    parser.add_argument("--batch", type=int, default=2_000, help="recipients per group item (per deliver call)")
    parser.add_argument("--days", type=int, default=45, help="the items' times spread over this many days")
    parser.add_argument("--port", type=int, default=6391, help="the private redis-server's port (else a free one)")
    parser.add_argument("--read-sample", type=int, default=1_500, help="users whose reads are timed")
    parser.add_argument("--memory-sample", type=int, default=10, help="users per tier whose keys are sized")
    parser.add_argument(
        "--active-share", type=float, default=0.1, help="share of the users whose parts stay (read in the idle time)"
    )
    parser.add_argument("--output", default=str(ROOT / "bench" / "SCALE.md"))
    args = parser.parse_args()
    args.load_at_start = os.getloadavg()[0]

    # A SIGTERM unwinds like Ctrl-C, so the private Redis is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.perf_counter()
    port = _free_port(args.port)
    with private_redis(port) as (url, pid):
        print(f"== private redis-server pid {pid} on port {port}", flush=True)
        os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings.bench"
        os.environ["BENCH_REDIS_URL"] = url
        os.environ["MESSAGECENTER_SELF_HEALING"] = "false"
        # A batch job on a busy machine: a slow reply is not the fault the
        # serving processes' short timeout is there to catch.
        os.environ.setdefault("REDIS_SOCKET_TIMEOUT", "30")
        import django

        django.setup()
        from core.redis import get_redis

        client = get_redis()
        version = client.info("server")["redis_version"]
        memory: dict[str, dict[str, Any]] = {}

        def snapshot(name: str) -> None:
            info = client.info("memory")
            info["keys"] = client.dbsize()
            memory[name] = info

        snapshot("empty")
        now_ms = int(time.time() * 1000)
        plan = plan_fill(users=args.users, entries=args.entries, batch=args.batch, now_ms=now_ms, days=args.days)
        print(f"== fill: {len(plan.items):,} items, {args.entries:,} entries to {args.users:,} users", flush=True)
        broadcasts(plan, now_ms=now_ms)
        filled = fill(plan, now_ms=now_ms, progress=True)
        print(f"   {filled['delivered']:,.0f} entries in {filled['seconds']:.0f} s", flush=True)
        snapshot("loaded")
        missing: list[str] = []
        sizes: dict[str, Any] | None = None
        latency: dict[str, dict[str, float]] | None = None

        def write() -> str:
            text = report(
                plan=plan,
                args=args,
                filled=filled,
                memory=memory,
                sizes=sizes,
                latency=latency,
                server=f"Redis {version} (private, port {port})",
                total_seconds=time.perf_counter() - started,
                missing=missing if sizes is None or latency is None else [],
            )
            Path(args.output).write_text(text, encoding="utf-8")
            return text

        # Written after each stage: a failure later keeps what was measured.
        missing = ["read latency (the run stopped before it)", "per-user key sizes (the run stopped before it)"]
        write()
        print("== timing reads", flush=True)
        latency = reads(plan, now_ms=now_ms, sample=args.read_sample)
        snapshot("final")
        missing = missing[1:]
        write()
        print("== sizing sampled users' keys", flush=True)
        # Its own connection without a read timeout: SCAN calls over millions of keys are slow.
        import redis

        sizing = redis.Redis.from_url(url, socket_timeout=None)
        try:
            sizes = per_user_bytes(plan, sizing, sample=args.memory_sample)
        finally:
            sizing.close()
        write()
        print(f"== keeping {args.active_share:.0%} of the users active", flush=True)
        dropped = keep_active(plan, share=args.active_share)
        snapshot("active")
        memory["active"]["dropped"] = dropped
        text = write()
        client.close()
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
