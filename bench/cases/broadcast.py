"""Broadcast to every user: an announcement, an everyone-message and a
bulletin, each against django-notifications-hq's ``notify.send`` to the same
number of users (its own virtual environment and database, see
bench/incumbent/), a plain row-per-recipient table filled by one
INSERT ... SELECT, and the same table filled through the ORM's ``bulk_create``.
"""

from collections.abc import Callable

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from bench import data, incumbent_client
from bench.harness import Row, Stats, measure
from core.redis import get_redis
from messagecenter.services.bulletins import bulletin_create
from messagecenter.services.messages import message_send
from notices.models import Announcement
from notices.services import announcement_create

PLATFORM = "user"


def run(*, users: int, quick: bool) -> list[Row]:
    low, high = data.ensure_users(users)
    User = get_user_model()
    operator, _ = User.objects.get_or_create(username="bench-operator", defaults={"is_staff": True})
    data.reset_baseline_table()
    Announcement.objects.all().delete()
    data.reset_items()
    get_redis().flushdb()

    # Ours. Each publish commits inside the timing: the Redis work that runs
    # after commit (platform index, pull registration, bulletin entry) is
    # part of the cost; delivery to users is not a step of its own.
    def announcement() -> None:
        with transaction.atomic():
            announcement_create(author=operator, title="Maintenance", body_html="<p>Tonight.</p>", platforms=[PLATFORM])

    def everyone_message() -> None:
        with transaction.atomic():
            message_send(sender=operator, category="system", title="Hello", body_html="<p>Hi</p>", everyone=True)

    def bulletin() -> None:
        with transaction.atomic():
            bulletin_create(title="Bulletin", body_html="<p>News</p>", display_time=timezone.now(), actor=operator)

    repeat = 5 if quick else 20
    ours: list[tuple[str, Stats, str]] = [
        ("announcement", measure(announcement, repeat=repeat, warmup=2), "PostgreSQL row + platform index in Redis"),
        ("everyone-message", measure(everyone_message, repeat=repeat, warmup=2), "PostgreSQL row + pull entry"),
        ("bulletin", measure(bulletin, repeat=repeat, warmup=2), "PostgreSQL row + bulletin entry in Redis"),
    ]

    # Baselines on the same users, in the same run.
    item = iter(range(1, 10_000_000))
    insert_select = measure(lambda: data.baseline_fanout_insert_select(next(item), low, high), repeat=3, warmup=1)
    data.baseline_bulk_create(next(item), low, low + 999)  # warm-up: the ORM's code paths and the table
    bulk: Callable[[], None] = lambda: data.baseline_bulk_create(next(item), low, high)  # noqa: E731
    bulk_create = measure(bulk, repeat=1 if quick else 3, warmup=0)
    incumbent = incumbent_client.results(users=users, quick=quick)
    notify_send = float(incumbent["broadcast"]["seconds"])
    assert incumbent["broadcast"]["sent"] == users, incumbent["broadcast"]

    rows: list[Row] = []
    for name, stats, what in ours:
        case = f"broadcast: {name}"
        measure_text = f"publish to {users:,} users"
        rows += [
            Row(
                case,
                measure_text,
                stats.median,
                "s",
                f"notify.send ({incumbent_client.source(incumbent)})",
                notify_send,
                p99=stats.p99,
                target=10_000,
                note=f"ours: {what}, O(1) in users; notify.send measured once to {users:,} users "
                f"(one INSERT and commit per recipient) after a {incumbent['broadcast']['warmup']}-user warm-up",
            ),
            Row(
                case,
                measure_text,
                stats.median,
                "s",
                "INSERT ... SELECT row per user",
                insert_select.median,
                p99=stats.p99,
                baseline_p99=insert_select.p99,
                target=100,
            ),
            Row(
                case,
                measure_text,
                stats.median,
                "s",
                "bulk_create row per user",
                bulk_create.median,
                p99=stats.p99,
                note=f"bulk_create of {users:,} model instances, batches of 5,000" if name == "announcement" else "",
            ),
        ]
    return rows
