"""The rebuild time: ``python -m bench.rebuild_time [--users N]`` (``make bench-rebuild``).

Creates ``--users`` users in PostgreSQL in bulk and a realistic amount of
state (push messages to every user and to a group, ``--items`` personal
messages of one recipient each, a message to everyone, bulletins,
announcements, read marks and their committed read state), then empties a
private redis-server and times ``durability.rebuild.rebuild()`` filling it
from PostgreSQL: the wall clock and each stage the rebuild reports. The
rebuild restores only what users share, so its time does not grow with the
users (each user's part is filled on their first read), but it does with the
pull messages, whose details it restores (a pushed item's detail comes back
with the fill of a recipient who returns: the run then fills ``RETURNING``
users twice, first with their details missing, then present). Writes bench/REBUILD.md. The private Redis is stopped by
its PID whatever happens; the machine's shared Redis is not touched.
"""

import argparse
import os
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.scale import ROOT, _commit, _free_port, private_redis

# Push messages every user receives, and those only a tenth of the users (a group) receive.
MESSAGES_TO_ALL = 5
MESSAGES_TO_GROUP = 10
# Users who mark things read (committed to PostgreSQL with each mark).
READERS = 500
# Users who come back after the rebuild: each fill brings back the details of
# the user's items that Redis lacks, then the same users are filled again.
RETURNING = 200


class _Timer:
    """Progress that remembers how long each stage of the rebuild took."""

    def __init__(self) -> None:
        from durability.progress import Progress

        self.progress = Progress(sys.stdout, tty=False)
        self.stages: list[tuple[str, int, float]] = []
        inner = self.progress.stage
        timer = self

        def stage(name: str, total: int) -> Any:
            made = inner(name, total)
            done = made.done
            recorded = False

            def finish() -> None:
                nonlocal recorded
                if not recorded:  # a stage may be finished twice (its block's exit after an explicit done)
                    recorded = True
                    timer.stages.append((name, made.count, time.monotonic() - made.started))
                done()

            made.done = finish  # type: ignore[method-assign]
            return made

        self.progress.stage = stage  # type: ignore[method-assign]


def personal_messages(*, operator: Any, user_ids: list[int], count: int) -> int:
    """``count`` push messages of one recipient each (the users in turn), as
    stored and fanned out, written in bulk: the rows a rebuild reads (their
    details are what users share; their entries wait for the users' fills)."""
    from django.db import connection
    from django.utils import timezone
    from pyroaring import BitMap

    from bench.data import _slots
    from messagecenter.models import DeliveryMode, Message, MessageRecipient, MessageStatus

    now = timezone.now()
    month = now.year * 100 + now.month
    first = _slots(month, count)
    batch = 5_000
    for start in range(0, count, batch):
        rows = []
        for i in range(start, min(count, start + batch)):
            audience = BitMap([user_ids[i % len(user_ids)]]).serialize()
            rows.append(
                Message(
                    category=("system", "transaction", "interaction")[i % 3],
                    title=f"Your order {i} has shipped",
                    summary="It arrives on Thursday",
                    body_html="<p>Your parcel left the warehouse.</p>",
                    sender=operator,
                    created_at=now - timedelta(seconds=count - i),
                    users_bitmap=audience,
                    audience_bitmap=audience,
                    audience_size=1,
                    delivery=DeliveryMode.PUSH,
                    status=MessageStatus.DELIVERED,
                    fanout_total=1,
                    slot_month=month,
                    slot_offset=first + i,
                )
            )
        created = Message.objects.bulk_create(rows)
        MessageRecipient.objects.bulk_create(
            MessageRecipient(user_id=user_ids[(start + j) % len(user_ids)], message_id=m.pk)
            for j, m in enumerate(created)
        )
    with connection.cursor() as cursor:
        for model in (Message, MessageRecipient):
            cursor.execute(f"ANALYZE {model._meta.db_table}")
    return count


def create_state(users: int, items: int) -> dict[str, int]:
    """The PostgreSQL state the rebuild reads, made through the bulk paths and services."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from bench.data import ensure_users, inbox_messages, reset_items
    from messagecenter.services.bulletins import bulletin_create
    from messagecenter.services.groups import user_group_add_members, user_group_create
    from messagecenter.services.inbox import inbox_mark_read
    from messagecenter.services.messages import message_send
    from notices.models import Announcement
    from notices.services import announcement_create, announcement_mark_read

    reset_items()
    Announcement.objects.all().delete()
    low, high = ensure_users(users)
    user_model = get_user_model()
    # ON CONFLICT in ensure_users spends sequence values: ids have gaps, so they are read back.
    everyone = list(
        user_model.objects.filter(id__range=(low, high), username__regex=r"^bench[0-9]+$").values_list("id", flat=True)
    )
    group_members = everyone[:: max(1, len(everyone) // (users // 10 or 1))][: users // 10]
    operator, _ = user_model.objects.get_or_create(username="bench-operator", defaults={"is_staff": True})
    group = user_group_create(name=f"rebuild-bench-{time.time_ns()}")
    user_group_add_members(group=group, user_ids=group_members)
    refs = inbox_messages(
        operator=operator, audiences=[(MESSAGES_TO_GROUP, group_members), (MESSAGES_TO_ALL, everyone)]
    )
    personal = personal_messages(operator=operator, user_ids=everyone, count=items)
    message_send(sender=operator, category="system", title="To everyone", body_html="<p>Hello all</p>", everyone=True)
    now = timezone.now()
    for i in range(2):
        bulletin_create(title=f"Bulletin {i}", body_html="<p>Bulletin</p>", display_time=now - timedelta(minutes=1))
    announcements = [
        announcement_create(author=operator, title=f"Announcement {i}", body_html="<p>News</p>", platforms=["user"])
        for i in range(3)
    ]
    readers = user_model.objects.filter(id__in=everyone[:READERS])
    for user in readers:
        inbox_mark_read(user=user, item_id=refs[-1])
        announcement_mark_read(user=user, announcement_id=announcements[0].id)
    return {
        "users": users,
        "group members": len(group_members),
        "bulk push messages": len(refs),
        "personal messages (one recipient each)": personal,
        "inbox entries (push)": MESSAGES_TO_ALL * len(everyone) + MESSAGES_TO_GROUP * len(group_members) + personal,
        "readers": READERS,
    }


def returning_fills(client: Any) -> tuple[list[float], list[float], int]:
    """Fill ``RETURNING`` users after the rebuild (their items' details are not
    in Redis yet, but for the bulk messages' once the first brought them back),
    then fill them again (every detail there): the seconds of each fill, and
    how many details the first fills brought back."""
    from django.contrib.auth import get_user_model

    from messagecenter import keys as mc_keys
    from messagecenter.fill import inbox_fill

    users = list(
        get_user_model()
        .objects.filter(username__regex=r"^bench[0-9]+$")
        .order_by("pk")
        .values_list("pk", flat=True)[:RETURNING]
    )

    def timed_fill(user_id: int) -> float:
        started = time.perf_counter()
        assert inbox_fill(user_id=user_id)
        return time.perf_counter() - started

    before = client.hlen(mc_keys.item_detail())
    cold = [timed_fill(user_id) for user_id in users]
    back = client.hlen(mc_keys.item_detail()) - before
    warm = [timed_fill(user_id) for user_id in users]
    return cold, warm, back


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rebuild_time")
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--items", type=int, default=200_000, help="live personal messages (details to restore)")
    parser.add_argument("--port", type=int, default=6393, help="the private redis-server's port (else a free one)")
    parser.add_argument("--output", default=str(ROOT / "bench" / "REBUILD.md"))
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    port = _free_port(args.port)
    with private_redis(port) as (url, pid):
        print(f"== private redis-server pid {pid} on port {port}", flush=True)
        os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings.bench"
        os.environ["BENCH_REDIS_URL"] = url
        os.environ["MESSAGECENTER_SELF_HEALING"] = "false"
        os.environ.setdefault("REDIS_SOCKET_TIMEOUT", "30")
        import django

        django.setup()
        from django.core.management import call_command

        from bench.__main__ import _ensure_database
        from core.redis import get_redis
        from durability import rebuild

        _ensure_database()  # a fresh machine has no bench database yet
        call_command("migrate", verbosity=0)
        print(f"== creating {args.users:,} users and their state in PostgreSQL", flush=True)
        created_at = time.perf_counter()
        state = create_state(args.users, args.items)
        create_seconds = time.perf_counter() - created_at
        client = get_redis()
        # The private Redis of this run only: emptied so the rebuild starts from nothing.
        client.flushdb()
        print("== rebuild on an empty Redis", flush=True)
        load = os.getloadavg()
        timer = _Timer()
        started = time.perf_counter()
        result = rebuild.rebuild(progress=timer.progress)
        seconds = time.perf_counter() - started
        load_after = os.getloadavg()
        keys = client.dbsize()
        used = int(client.info("memory")["used_memory"])
        print(f"== {RETURNING} users come back: filled with their details missing, then again", flush=True)
        cold, warm, details_back = returning_fills(client)
        version = client.info("server")["redis_version"]
        client.close()
    assert result is not None
    staged = sum(sec for _, _, sec in timer.stages)
    written = state["inbox entries (push)"]
    lines = [
        "# Rebuild of the read model from PostgreSQL",
        "",
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC at commit {_commit()}; `python -m bench.rebuild_time "
        f"--users {args.users} --items {args.items}`; Redis {version} (private, port {port}, emptied before the rebuild); "
        f"load average (1 min) {load[0]:.2f} before, {load_after[0]:.2f} after, on {os.cpu_count()} cores.",
        "",
        "## State in PostgreSQL",
        "",
        *[f"- {k}: {v:,}" for k, v in state.items()],
        "- plus 1 message to everyone (pull), 2 bulletins, 3 announcements",
        f"- created in {create_seconds:.1f} s",
        "",
        "## Result",
        "",
        "| figure | value |",
        "|---|---|",
        f"| users | {args.users:,} |",
        f"| inbox entries in PostgreSQL (push), left to each user's first read | {written:,} |",
        f"| Redis keys after | {keys:,} |",
        f"| Redis used memory after | {used / 1024 / 1024:,.1f} MiB |",
        f"| rebuild wall clock | {seconds * 1e3:,.0f} ms |",
        f"| sum of the stages | {staged * 1e3:,.0f} ms |",
        f"| outbox entries replayed | {result.outbox} |",
        f"| fills of {RETURNING} returning users, details missing: p50 / p99 | "
        f"{_pct(cold, 0.5):.2f} / {_pct(cold, 0.99):.2f} ms |",
        f"| the same users filled again, details there: p50 / p99 | "
        f"{_pct(warm, 0.5):.2f} / {_pct(warm, 0.99):.2f} ms |",
        f"| details those fills brought back | {details_back:,} |",
        "",
        "## Stages",
        "",
        "| stage | count | time |",
        "|---|---|---|",
        *[f"| {name} | {count:,} | {sec * 1e3:,.0f} ms |" for name, count, sec in timer.stages],
        "",
        "## Steps' own counts",
        "",
        *[
            f"- {name}: " + ", ".join(f"{k} {v:,}" for k, v in (done or {}).items())
            for name, done in result.steps.items()
        ],
        "",
        "The rebuild restores what users share (announcement indexes and read bits, bulletins, the pull index"
        " and its messages' details, subscriber sets); each user's own part is filled from PostgreSQL on their"
        f" first read ({written / args.users:.1f} push entries a user here), with the details of the user's items"
        " that Redis lacks. Its time grows with the announcements' readers and the broadcasts, not with the users"
        " nor with the personal messages, whose details come back with their recipients.",
        "",
    ]
    text = "\n".join(lines)
    Path(args.output).write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
