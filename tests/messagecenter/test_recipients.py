"""What a user's fill costs: each fan-out chunk records the users it reached in
PostgreSQL before its Redis write, and a fill reads the user's pushed items by
those rows alone, so its cost follows the user's items, not everyone's; a fill
is settled up to the removals before it."""

import importlib
from typing import Any

import pytest
from django.apps import apps
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.redis import get_redis
from durability import outbox
from messagecenter import keys as mc_keys
from messagecenter import services
from messagecenter.fill import inbox_fill
from messagecenter.models import Message, MessageRecipient, NotificationRecipient
from messagecenter.readmodel.user_part import user_part_drop
from messagecenter.selectors import inbox_list
from messagecenter.services import messages, notifications
from tests.factories import UserFactory
from tests.messagecenter.conftest import send

pytestmark = pytest.mark.django_db(transaction=True)


def test_each_chunk_records_its_users_once(operator: Any, settings: Any) -> None:
    settings.MESSAGECENTER_FANOUT_CHUNK = 2
    users = [UserFactory() for _ in range(5)]
    message = send(operator, to={"users": users})
    expected = {(u.pk, message.pk) for u in users}
    assert set(MessageRecipient.objects.values_list("user_id", "message_id")) == expected
    # A rerun of a chunk (a worker that died after its Redis write) adds nothing.
    messages.message_fanout_chunk(message=message, index=1)
    assert MessageRecipient.objects.count() == 5

    services.message_type_create(code="stock", name="Stock", default_ttl_seconds=3600)
    for user in users:
        services.subscription_create(message_type="stock", scope="WH1", user_id=user.pk)
    notification = services.notification_send(message_type="stock", scope="WH1", title="Low", body_html="")
    notifications.notification_fanout_chunk(notification=notification, index=0)
    assert set(NotificationRecipient.objects.values_list("user_id", "notification_id")) == {
        (u.pk, notification.pk) for u in users
    }


def test_recipient_rows_are_one_statement_that_keeps_the_rows_it_has(operator: Any, recipient: Any) -> None:
    """One INSERT however many users; users already recorded stay as they are,
    a user deleted since the send still gets a row (the chunk must commit),
    and no user writes nothing."""
    from messagecenter.services.recipients import recipients_add

    message = send(operator, to={"users": [recipient]})
    gone = 10**9  # no such user
    users = [UserFactory().pk for _ in range(3)]
    with CaptureQueriesContext(connection) as queries:
        recipients_add(item=message, user_ids=[recipient.pk, *users, gone])
    assert len(queries.captured_queries) == 1
    assert set(MessageRecipient.objects.filter(message=message).values_list("user_id", flat=True)) == {
        recipient.pk,
        *users,
        gone,
    }
    with CaptureQueriesContext(connection) as queries:
        recipients_add(item=message, user_ids=[])
    assert queries.captured_queries == []


def test_a_pulled_message_has_no_row_per_user(operator: Any, settings: Any) -> None:
    settings.MESSAGECENTER_PUSH_THRESHOLD = 2
    users = [UserFactory() for _ in range(3)]
    message = send(operator, to={"users": users})
    assert message.delivery == "pull"
    assert not MessageRecipient.objects.exists()


def _fill_queries(user: Any) -> list[str]:
    user_part_drop(user_id=user.pk, group_keys=())
    # The outbox's "nothing pending" memory lasts a couple of seconds of wall
    # clock: forgotten here, every fill asks once, however slow the run.
    outbox.forget_local_state()
    with CaptureQueriesContext(connection) as queries:
        assert inbox_fill(user_id=user.pk)
    return [q["sql"] for q in queries.captured_queries]


def test_a_fill_reads_the_users_rows_not_every_audience(operator: Any, recipient: Any) -> None:
    services.message_type_create(code="stock", name="Stock", default_ttl_seconds=3600)
    services.subscription_create(message_type="stock", scope="WH1", user_id=recipient.pk)
    mine = [send(operator, to={"users": [recipient]}, title=f"mine {i}").ref for i in range(2)]
    noted = services.notification_send(message_type="stock", scope="WH1", title="Low", body_html="")
    _fill_queries(recipient)  # the first fill of the process also loads what it caches
    before = _fill_queries(recipient)
    others = [UserFactory() for _ in range(3)]
    for i in range(20):
        send(operator, to={"users": others}, title=f"theirs {i}")
    after = _fill_queries(recipient)
    # No audience is read, and other users' items add no query.
    assert not [sql for sql in after if "audience_bitmap" in sql]
    assert len(after) == len(before)
    # The user's own rows, their items and answers. (With self-healing on, as
    # in production, the outbox's "pending?" for the user follows: a write that
    # met the fill may have left the part stale.)
    assert len(after) == 2, after
    page = inbox_list(user=recipient, limit=50)
    assert {row.id for row in page.results} == {*mine, noted.ref}


def test_an_item_without_the_users_row_is_not_filled(operator: Any, recipient: Any) -> None:
    """The row is what a fill trusts: a chunk that has not run yet (its row not
    written) delivers to the user later, after the fill."""
    kept = send(operator, to={"users": [recipient]}, title="kept")
    pending = send(operator, to={"users": [recipient]}, title="chunk not run yet")
    MessageRecipient.objects.filter(message=pending).delete()
    user_part_drop(user_id=recipient.pk, group_keys=())
    assert inbox_fill(user_id=recipient.pk)
    assert [row.id for row in inbox_list(user=recipient, limit=50).results] == [kept.ref]
    messages.message_fanout_chunk(message=Message.objects.get(pk=pending.pk), index=0)
    assert [row.id for row in inbox_list(user=recipient, limit=50).results] == [pending.ref, kept.ref]


def test_the_migration_backfills_the_live_pushed_items(operator: Any, recipient: Any) -> None:
    services.message_type_create(code="stock", name="Stock", default_ttl_seconds=3600)
    services.subscription_create(message_type="stock", scope="WH1", user_id=recipient.pk)
    others = [UserFactory() for _ in range(2)]
    message = send(operator, to={"users": [recipient, *others]})
    retracted = send(operator, to={"users": [recipient]})
    services.message_retract(message=retracted)
    noted = services.notification_send(message_type="stock", scope="WH1", title="Low", body_html="")
    MessageRecipient.objects.all().delete()
    NotificationRecipient.objects.all().delete()
    importlib.import_module("messagecenter.migrations.0020_recipients")._backfill(apps, None)
    assert set(MessageRecipient.objects.values_list("user_id", "message_id")) == {
        (u.pk, message.pk) for u in (recipient, *others)
    }
    assert list(NotificationRecipient.objects.values_list("user_id", "notification_id")) == [(recipient.pk, noted.pk)]


def test_a_fill_is_settled_up_to_the_removals_before_it(operator: Any, recipient: Any) -> None:
    """A fill reads PostgreSQL after every removal up to the version it notes
    had committed, so the user's first read settles only the removals made
    since (not a check of every item against its detail)."""
    gone, kept, later = (send(operator, to={"users": [recipient]}, title=t) for t in ("gone", "kept", "later"))
    services.message_retract(message=gone)
    user_part_drop(user_id=recipient.pk, group_keys=())
    assert inbox_fill(user_id=recipient.pk)
    settled = get_redis().hget(mc_keys.inbox_state(recipient.pk), "settled")
    assert settled is not None
    assert int(settled) == _removal_version() > 0
    services.message_retract(message=later)
    assert _removal_version() > int(settled)
    assert [row.id for row in inbox_list(user=recipient, limit=50).results] == [kept.ref]


def _removal_version() -> int:
    return int(get_redis().get(mc_keys.removed_version()) or 0)
