"""Measure django-notifications-hq on the bench's data shapes; print JSON.

Run by the main bench (bench/incumbent_client.py) with the interpreter of
bench/.venv-incumbent (Django 4.2: the package does not load on 5.2)::

    bench/.venv-incumbent/bin/python bench/incumbent/run.py --users 100000

It creates its own tables in its own database (messagecenter_bench_incumbent),
builds the same users as the main bench (bench1..benchN, one INSERT ...
SELECT), and times what an application using the package calls:

- ``notify.send`` to every user (the package's broadcast: one INSERT and one
  commit per recipient), once after a small warm-up send;
- the first 20 unread plus the unread count for a user with 1,000
  notifications, 30% read (what its ``live_unread_notification_list`` does);
- the unread count for a user with 11,000 (10,000 inbox items and 1,000
  announcements, 30% read);
- ``mark_all_as_read`` for a user with 10,000 unread;

(the sizes of a full run; the options set them, --quick runs smaller ones)
- PostgreSQL bytes per notification row (pg_total_relation_size / rows,
  indexes included) after the broadcast.

Nothing is extrapolated: every figure is measured at the size it states.
"""

import argparse
import json
import os
import platform
import sys
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path[:0] = [str(HERE), str(ROOT)]  # settings.py here; bench.harness (stdlib only) from the repo
os.environ["DJANGO_SETTINGS_MODULE"] = "settings"
warnings.filterwarnings("ignore")  # index_together's deprecation warning on Django 4.2

import django  # noqa: E402
import psycopg2  # noqa: E402

WARMUP_RECIPIENTS = 200


def _ensure_database() -> None:
    from django.conf import settings

    db = settings.DATABASES["default"]
    conn = psycopg2.connect(
        dbname="postgres", host=db["HOST"], port=db["PORT"], user=db["USER"], password=db["PASSWORD"] or None
    )
    conn.autocommit = True
    with conn.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]])
        if cursor.fetchone() is None:
            cursor.execute(f'CREATE DATABASE "{db["NAME"]}"')
    conn.close()


def _ensure_users(n: int) -> None:
    """bench1..benchN exactly as the main bench builds them (bench/data.py)."""
    from django.db import connection

    with connection.cursor() as cursor:
        # bench<digits> only: bench-operator and the bench readers are not part of the crowd.
        cursor.execute("SELECT count(*) FROM auth_user WHERE username ~ '^bench[0-9]+$'")
        have = cursor.fetchone()[0]
        if have < n:
            cursor.execute(
                """
                INSERT INTO auth_user (password, is_superuser, username, first_name, last_name, email,
                                       is_staff, is_active, date_joined)
                SELECT '!', false, 'bench' || g, '', '', '', false, true, now()
                FROM generate_series(%s, %s) AS g
                ON CONFLICT (username) DO NOTHING
                """,
                [1, n],
            )


def _stats(samples: list[float]) -> dict[str, Any]:
    from bench.harness import Stats

    stats = Stats(samples)
    return {"median": stats.median, "p99": stats.p99, "n": len(samples)}


def _notifications_for(user: Any, actor: Any, *, count: int, read_every: int | None) -> None:
    """``count`` notifications for ``user``, newest first by a second each; every
    ``i % 10 < read_every`` one read (3 -> 30%), as the main bench marks its items."""
    from django.contrib.contenttypes.models import ContentType
    from django.utils import timezone

    from notifications.models import Notification

    actor_type = ContentType.objects.get_for_model(actor)
    now = timezone.now()
    Notification.objects.bulk_create(
        (
            Notification(
                recipient=user,
                actor_content_type=actor_type,
                actor_object_id=str(actor.pk),
                verb="sent",
                description=f"Item {i}",
                timestamp=now - timedelta(seconds=i),
                unread=not (read_every is not None and i % 10 < read_every),
            )
            for i in range(count)
        ),
        batch_size=2_000,
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--users", type=int, required=True, help="notify.send recipients (bench1..benchN)")
    parser.add_argument("--repeat", type=int, default=200, help="timed calls of the fast reads")
    parser.add_argument("--mark-repeat", type=int, default=10, help="timed mark_all_as_read calls")
    parser.add_argument("--page-items", type=int, default=1_000, help="notifications of the page's user")
    parser.add_argument("--count-items", type=int, default=11_000, help="notifications of the counts user")
    parser.add_argument("--mark-items", type=int, default=10_000, help="unread notifications marked read")
    args = parser.parse_args()

    django.setup()
    _ensure_database()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    from bench.harness import measure, once
    from notifications.models import Notification
    from notifications.signals import notify

    call_command("migrate", verbosity=0)
    _ensure_users(args.users)
    User = get_user_model()
    operator, _ = User.objects.get_or_create(username="bench-operator", defaults={"is_staff": True})
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {Notification._meta.db_table}")

    def audience(n: int) -> Any:
        return User.objects.filter(username__startswith="bench", username__regex=r"^bench[0-9]+$").order_by("id")[:n]

    # Broadcast: the package's notify.send to every user, autocommit as an
    # application calls it (one INSERT and commit per recipient).
    notify.send(operator, recipient=audience(WARMUP_RECIPIENTS), verb="published", description="Warm-up")
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {Notification._meta.db_table}")
    recipients = audience(args.users)
    broadcast = once(lambda: notify.send(operator, recipient=recipients, verb="published", description="Tonight."))
    sent = Notification.objects.count()
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Notification._meta.db_table}")
        cursor.execute(f"SELECT pg_total_relation_size('{Notification._meta.db_table}')")
        table_bytes = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM pg_indexes WHERE tablename = %s", [Notification._meta.db_table])
        indexes = cursor.fetchone()[0]

    # Per-user shapes; the broadcast rows stay, as other users' notifications do.
    page_user, _ = User.objects.get_or_create(username="bench-reader-page")
    count_user, _ = User.objects.get_or_create(username="bench-reader-counts")
    mark_user, _ = User.objects.get_or_create(username="bench-reader-mark")
    for user in (page_user, count_user, mark_user):
        Notification.objects.filter(recipient=user).delete()
    _notifications_for(page_user, operator, count=args.page_items, read_every=3)
    _notifications_for(count_user, operator, count=args.count_items, read_every=3)
    _notifications_for(mark_user, operator, count=args.mark_items, read_every=None)
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {Notification._meta.db_table}")

    def page() -> None:
        # live_unread_notification_list: the first unread ones and the unread count.
        # django-notifications-hq's reverse relation, added to the user model at run time.
        list(page_user.notifications.unread()[:20])  # type: ignore[attr-defined]
        # django-notifications-hq's reverse relation, added to the user model at run time.
        page_user.notifications.unread().count()  # type: ignore[attr-defined]

    unread_expected = sum(1 for i in range(args.count_items) if i % 10 >= 3)
    # django-notifications-hq's reverse relation, added to the user model at run time.
    assert count_user.notifications.unread().count() == unread_expected  # type: ignore[attr-defined]
    page_stats = measure(page, repeat=args.repeat, warmup=20)
    # django-notifications-hq's reverse relation, added to the user model at run time.
    count_stats = measure(lambda: count_user.notifications.unread().count(), repeat=args.repeat, warmup=20)  # type: ignore[attr-defined]

    def mark_setup() -> None:
        Notification.objects.filter(recipient=mark_user).update(unread=True)

    marked: list[int] = []
    mark_stats = measure(
        # django-notifications-hq's reverse relation, added to the user model at run time.
        lambda: marked.append(mark_user.notifications.mark_all_as_read()),  # type: ignore[attr-defined]
        repeat=args.mark_repeat,
        warmup=2,
        setup=mark_setup,
    )
    assert set(marked) == {args.mark_items}, set(marked)

    import notifications

    result = {
        "package": f"django-notifications-hq {getattr(notifications, '__version__', '1.8.3')}",
        "django": django.get_version(),
        "python": platform.python_version(),
        "database": connection.settings_dict["NAME"],
        "broadcast": {"recipients": args.users, "sent": sent, "seconds": broadcast, "warmup": WARMUP_RECIPIENTS},
        "bytes_per_row": table_bytes / sent if sent else 0.0,
        "rows": sent,
        "indexes": indexes,
        "page": {"items": args.page_items, "read": "30%", **_stats(page_stats.samples)},
        "unread_count": {
            "items": args.count_items,
            "read": "30%",
            **_stats(count_stats.samples),
        },
        "mark_all_read": {"items": args.mark_items, **_stats(mark_stats.samples)},
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
