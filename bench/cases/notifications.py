"""Subscriptions: notification fan-out rate to 10,000 subscribers, and
the expiry sweep's rate over 100,000 expired entries, each next to a
one-row-per-recipient PostgreSQL baseline measured in the same run."""

from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from bench import data
from bench.harness import Row, measure, once
from core.redis import get_redis
from messagecenter.models import MessageType, Notification, UserGroup, UserGroupMembership
from messagecenter.services import message_type_create, notification_send, notification_sweep, subscription_create

SUBSCRIBERS = 10_000
SWEEP_NOTIFICATIONS = 10  # x 10,000 subscribers = 100,000 expired entries


def _send(ttl_seconds: int | None = None) -> Notification:
    with transaction.atomic():  # fan-out runs after commit (eager Celery here): part of the cost
        return notification_send(
            message_type="bench-alert",
            scope="WH1",
            title="Stock low",
            body_html="<p>Refill</p>",
            ttl_seconds=ttl_seconds,
        )


def run(*, users: int, quick: bool) -> list[Row]:
    low, _ = data.ensure_users(users)
    rows: list[Row] = []
    data.reset_baseline_table()
    get_redis().flushdb()
    Notification.objects.all().delete()
    MessageType.objects.filter(code="bench-alert").delete()
    UserGroup.objects.filter(name="bench-subscribers").delete()

    subscribers = min(SUBSCRIBERS, users)
    group = UserGroup.objects.create(name="bench-subscribers")
    UserGroupMembership.objects.bulk_create(
        UserGroupMembership(group=group, user_id=uid) for uid in range(low, low + subscribers)
    )
    message_type_create(code="bench-alert", name="Bench alert")
    subscription_create(message_type="bench-alert", scope="WH1", group_id=group.pk)

    # --- fan-out to every subscriber -------------------------------------------------------
    _send()  # warm-up
    sends = measure(_send, repeat=3 if quick else 5, warmup=0)
    item = iter(range(1, 10_000_000))
    base = measure(
        lambda: data.baseline_fanout_insert_select(next(item), low, low + subscribers - 1), repeat=3, warmup=1
    )
    rows.append(
        Row(
            "notifications",
            f"fan-out to {subscribers:,} subscribers",
            subscribers / sends.median,
            "/s",
            "INSERT ... SELECT row per recipient",
            subscribers / base.median,
            better="higher",
            note=f"recipient-writes per second; one send took {sends.median * 1e3:.0f} ms",
        )
    )

    # --- the expiry sweep over 100,000 expired entries ------------------------------------------
    get_redis().flushdb()
    Notification.objects.all().delete()
    count = 2 if quick else SWEEP_NOTIFICATIONS
    for _ in range(count):
        _send(ttl_seconds=60)  # outlives the sends, so only the sweep removes them
    entries = count * subscribers
    later = timezone.now() + timedelta(minutes=5)
    removed: dict[str, int] = {}
    elapsed = once(lambda: removed.update(notification_sweep(now=later)))
    assert removed["removed"] == entries, removed

    data.reset_baseline_table()
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {data.BASELINE_TABLE} (user_id, item_id, created) "
            "SELECT u, n, now() - interval '1 hour' FROM generate_series(%s, %s) u, generate_series(1, %s) n",
            [low, low + subscribers - 1, count],
        )
        cursor.execute(f"ANALYZE {data.BASELINE_TABLE}")

    def baseline_sweep() -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {data.BASELINE_TABLE} WHERE created < now()")

    base_elapsed = once(baseline_sweep)
    rows.append(
        Row(
            "notifications",
            f"expiry sweep over {entries:,} expired entries",
            entries / elapsed,
            "/s",
            "DELETE of expired rows",
            entries / base_elapsed,
            better="higher",
            note=f"entries removed per second ({elapsed:.2f} s): ZREMRANGEBYSCORE per holder in bounded batches, "
            "holders walked with SSCAN; details of expired notifications freed",
        )
    )
    return rows
