"""Bench data: users and their API tokens in bulk, and the one-row-per-recipient baseline table."""

import secrets
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db import connection

BASELINE_TABLE = "bench_recipient_row"


def ensure_users(n: int) -> tuple[int, int]:
    """At least ``n`` plain users named bench<i>; returns (min id, max id) of them.

    One INSERT ... SELECT: creating 100,000 users through the ORM would take
    longer than every case together. They have no platform rows, so the
    default rule puts them on the "user" platform.
    """
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
                -- Only the missing names: a conflicting row would still take an id
                -- from the sequence, and the cases count on the crowd's ids being
                -- one range (a quick run then a full one would leave a hole).
                WHERE NOT EXISTS (SELECT 1 FROM auth_user u WHERE u.username = 'bench' || g)
                ON CONFLICT (username) DO NOTHING
                """,
                [1, n],
            )
        cursor.execute(
            "SELECT min(id), max(id) FROM (SELECT id FROM auth_user WHERE username ~ '^bench[0-9]+$' ORDER BY id LIMIT %s) s",
            [n],
        )
        low, high = cursor.fetchone()
    return int(low), int(high)


def issue_tokens(users: Iterable[Any], *, batch_size: int = 5_000) -> dict[int, str]:
    """A new API token for each of ``users`` (with their current password
    hash: load them after any password change); returns {user id: token}.

    The rows ``accounts.tokens.token_issue`` makes, one bulk INSERT for them all
    (thousands of users at once). Only a token's digest is stored, so the
    strings exist nowhere but in what this returns: each run issues its own,
    and first deletes the tokens earlier runs left these users (no one can
    present them any more).
    """
    from django.utils import timezone

    from accounts.models import ApiToken
    from accounts.tokens import PREFIX, password_mark, token_digest, token_lifetime

    users = list(users)
    ApiToken.objects.filter(user_id__in=[user.pk for user in users]).delete()
    now = timezone.now()
    expires_at = now + token_lifetime()
    tokens: dict[int, str] = {}
    rows = []
    for user in users:
        token = PREFIX + secrets.token_urlsafe(32)
        tokens[int(user.pk)] = token
        rows.append(
            ApiToken(
                user_id=user.pk,
                digest=token_digest(token),
                password_mark=password_mark(user.password or ""),
                created_at=now,
                expires_at=expires_at,
            )
        )
    ApiToken.objects.bulk_create(rows, batch_size=batch_size)
    return tokens


def reset_baseline_table() -> None:
    """A plain row-per-recipient table: what most notification apps write."""
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {BASELINE_TABLE}")
        cursor.execute(
            f"""
            CREATE TABLE {BASELINE_TABLE} (
                id bigserial PRIMARY KEY,
                user_id integer NOT NULL,
                item_id integer NOT NULL,
                category varchar(16) NOT NULL DEFAULT 'system',
                unread boolean NOT NULL DEFAULT true,
                created timestamptz NOT NULL DEFAULT now()
            )
            """
        )
        # The inbox query of the baseline: a user's unread items newest first.
        cursor.execute(f"CREATE INDEX {BASELINE_TABLE}_inbox ON {BASELINE_TABLE} (user_id, unread, created DESC)")


def baseline_fanout_insert_select(item_id: int, low: int, high: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {BASELINE_TABLE} (user_id, item_id) SELECT id, %s FROM auth_user WHERE id BETWEEN %s AND %s",
            [item_id, low, high],
        )


def baseline_bytes_per_row() -> float:
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {BASELINE_TABLE}")
        cursor.execute(f"SELECT pg_total_relation_size('{BASELINE_TABLE}'), (SELECT count(*) FROM {BASELINE_TABLE})")
        size, rows = cursor.fetchone()
    return size / rows if rows else 0.0


def baseline_bulk_create(item_id: int, low: int, high: int) -> None:
    """The ORM way of the same baseline: one model instance per recipient."""
    from bench.models import RecipientRow

    # The model has Django's default manager, which its type does not show.
    RecipientRow.objects.bulk_create(  # type: ignore[attr-defined]
        (RecipientRow(user_id=uid, item_id=item_id) for uid in range(low, high + 1)), batch_size=5_000
    )


def _slots(month: int, count: int) -> int:
    """Reserve ``count`` consecutive offsets of ``month`` at once (what
    ``slot_allocate`` hands out one by one); returns the first."""
    from django.db import transaction
    from django.db.models import F

    from messagecenter.models import ItemSlotMonth

    with transaction.atomic():
        ItemSlotMonth.objects.get_or_create(month=month)
        row = ItemSlotMonth.objects.select_for_update().get(month=month)
        start = int(row.next_offset)
        ItemSlotMonth.objects.filter(pk=month).update(next_offset=F("next_offset") + count)
    return start


def inbox_messages(*, operator: Any, audiences: list[tuple[int, list[int]]]) -> list[str]:
    """Push messages into inboxes in bulk; returns their refs, newest first.

    ``audiences`` is [(how many messages, user ids)], newest first: the first
    group's messages are the newest. Sending 10,000 messages one by one
    through ``message_send`` would take minutes; these are the same rows
    (stored, delivered) written with one bulk INSERT, then each delivered
    through the service every item source uses (``inbox_deliver``: detail
    stored once, the recipients' scripts in one pipeline).
    """
    from datetime import timedelta

    from django.utils import timezone
    from pyroaring import BitMap

    from messagecenter.items import message_detail, message_entry
    from messagecenter.models import DeliveryMode, Message, MessageRecipient, MessageStatus
    from messagecenter.services.inbox import inbox_deliver
    from messagecenter.services.recipients import recipients_add

    now = timezone.now()
    total = sum(n for n, _ in audiences)
    plan: list[tuple[datetime, list[int]]] = []
    position = 0
    for count, user_ids in audiences:
        for _ in range(count):
            plan.append((now - timedelta(seconds=position + 1), user_ids))
            position += 1
    months: dict[int, int] = {}
    for created_at, _ in plan:
        month = created_at.year * 100 + created_at.month
        months[month] = months.get(month, 0) + 1
    next_offset = {month: _slots(month, count) for month, count in months.items()}
    rows = []
    for i, (created_at, user_ids) in enumerate(plan):
        month = created_at.year * 100 + created_at.month
        audience = BitMap(user_ids)
        rows.append(
            Message(
                category=("system", "promotion", "transaction", "interaction")[i % 4],
                title=f"Message {i}",
                summary="A bench message",
                body_html="<p>A bench message</p>",
                sender=operator,
                created_at=created_at,
                users_bitmap=audience.serialize(),
                audience_bitmap=audience.serialize(),
                audience_size=len(audience),
                delivery=DeliveryMode.PUSH,
                status=MessageStatus.DELIVERED,
                fanout_total=len(audience),
                slot_month=month,
                slot_offset=next_offset[month],
            )
        )
        next_offset[month] += 1
    created = Message.objects.bulk_create(rows, batch_size=2_000)
    assert len(created) == total
    # Oldest first, as they would have arrived; the recipient rows first, as a fan-out writes them.
    for message, (_, user_ids) in reversed(list(zip(created, plan, strict=True))):
        recipients_add(item=message, user_ids=user_ids)
        inbox_deliver(entry=message_entry(message), user_ids=user_ids, detail=message_detail(message))
    # Planner statistics for the rows just written, as autovacuum keeps them
    # on a live database: a fill's plan on an empty table's estimates walks
    # every message instead of the user's recipient rows.
    with connection.cursor() as cursor:
        for model in (Message, MessageRecipient):
            cursor.execute(f"ANALYZE {model._meta.db_table}")
    return [m.ref for m in created]


def live_announcements(*, operator: Any, count: int, now: datetime | None = None) -> list[Any]:
    """``count`` announcements on the "user" platform, published a minute
    apart up to ``now``, with the platform's read model synced."""
    from django.utils import timezone

    from notices import readmodel
    from notices.models import Announcement, AnnouncementPlatform

    now = now or timezone.now()
    created = Announcement.objects.bulk_create(
        Announcement(
            title=f"A{i}", body_html="<p>x</p>", summary="x", publish_at=now - timedelta(minutes=i), author=operator
        )
        for i in range(count)
    )
    AnnouncementPlatform.objects.bulk_create(AnnouncementPlatform(announcement=a, platform="user") for a in created)
    readmodel.platform_sync(platform="user")
    return created


def first_page(user_id: int, *, now_ms: int, unread_only: bool = False, cache_field: str = "") -> Any:
    """The read model's first inbox page of 20 (every category, no cursor), as
    the inbox view asks for it."""
    from messagecenter.readmodel import inbox

    return inbox.inbox_page(
        user_id=user_id,
        now_ms=now_ms,
        category=None,
        max_score=None,
        skip=0,
        limit=20,
        unread_only=unread_only,
        since_ms=None,
        cache_field=cache_field,
    )


def user_redis_keys(user_id: int) -> list[bytes]:
    """Every Redis key of the user's hash tag: inbox zsets, counters, state, bitmaps."""
    from core import keys
    from core.redis import get_redis

    return list(get_redis().scan_iter(match=f"*{keys.user_tag(user_id)}*", count=1_000))


def reset_items() -> None:
    """No messages, bulletins or notifications, and every month's slot counter
    back to 0: each run's bitmaps start where a fresh month's would, so the
    bytes it reports do not grow with the number of earlier runs this month."""
    from durability.models import OutboxEntry
    from messagecenter.models import (
        Bulletin,
        InboxReadMonth,
        InboxSeen,
        ItemSlotMonth,
        Message,
        MessageRecipient,
        Notification,
        NotificationRecipient,
    )
    from notices.models import AnnouncementRead

    Message.objects.all().delete()
    Bulletin.objects.all().delete()
    Notification.objects.all().delete()
    ItemSlotMonth.objects.all().delete()
    # Read state of offsets that no longer mean anything, and
    # Redis writes still waiting to be replayed: a restore must not bring them back.
    InboxReadMonth.objects.all().delete()
    InboxSeen.objects.all().delete()
    AnnouncementRead.objects.all().delete()
    OutboxEntry.objects.all().delete()
    # The deleted rows' pages go too, as autovacuum would free them on a live
    # database: rows written next would otherwise land behind every earlier
    # run's dead pages, and a scan of a user's few rows would walk them all.
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            for model in (Message, MessageRecipient, Notification, NotificationRecipient, Bulletin, InboxReadMonth):
                cursor.execute(f"VACUUM {model._meta.db_table}")
