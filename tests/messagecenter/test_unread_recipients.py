"""Who has not read a message or bulletin yet, and the reminder to them: the
list agrees with the read count (the same ever-read bits), pages without
repeats or gaps, exports as CSV, and the reminder is an ordinary, audited,
idempotent send to exactly the non-readers of the moment."""

import csv
import io
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone
from pyroaring import BitMap

from audit.models import AuditEntry
from core.api.errors import NotFound
from messagecenter import insight, services
from messagecenter.models import Message, MessageStatus, PendingDelivery
from tests.conftest import assert_error, client_for
from tests.factories import StaffFactory, UserFactory
from tests.messagecenter.conftest import make_bulletin, make_group, send

pytestmark = pytest.mark.django_db(transaction=True)


def _unread_ids(client: Any, path: str, limit: int) -> list[int]:
    found, cursor = [], None
    while True:
        query = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        response = client.get(path, query)
        assert response.status_code == 200, response.content
        body = response.json()
        found += [int(row["id"]) for row in body["results"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return found


@pytest.mark.parametrize("threshold", [1000, 1], ids=["push", "pull"])
def test_unread_list_matches_a_brute_force_check(
    operator: Any, operator_client: Any, settings: Any, threshold: int
) -> None:
    settings.MESSAGECENTER_PUSH_THRESHOLD = threshold
    users = [UserFactory() for _ in range(9)]
    message = send(operator, to={"users": users})
    assert message.delivery == ("push" if threshold > 1 else "pull")
    readers = users[::3]
    for user in readers:
        services.inbox_mark_read(user=user, item_id=message.ref)
    # Read then unread again: still has read it (the read count says so too).
    services.inbox_mark_unread(user=readers[0], item_id=message.ref)
    expected = sorted(u.pk for u in users if u not in readers)
    path = f"/api/v1/manage/messages/{message.pk}/unread-recipients/"
    assert _unread_ids(operator_client, path, limit=2) == expected
    detail = operator_client.get(f"/api/v1/manage/messages/{message.pk}/").json()
    assert detail["read_count"] + len(expected) == detail["recipients"] == 9
    assert insight.item_readers(item=message) == BitMap(u.pk for u in readers)


def test_everyone_message_and_bulletins(operator: Any, operator_client: Any, recipient: Any, clock: Any) -> None:
    others = [UserFactory() for _ in range(3)]
    inactive = UserFactory(is_active=False)
    message = send(operator, to={"everyone": True})
    services.inbox_mark_read(user=others[0], item_id=message.ref)
    expected = sorted(u.pk for u in (operator, recipient, *others[1:]))
    assert _unread_ids(operator_client, f"/api/v1/manage/messages/{message.pk}/unread-recipients/", 50) == expected
    assert inactive.pk not in expected
    group = make_group("vip", recipient, others[0], others[1])
    bulletin = make_bulletin(operator, group, title="Stock-take", body_html="<p>Friday</p>")
    services.inbox_mark_read(user=others[1], item_id=bulletin.ref)
    path = f"/api/v1/manage/bulletins/{bulletin.pk}/unread-recipients/"
    assert _unread_ids(operator_client, path, 1) == sorted([recipient.pk, others[0].pk])


def test_csv_export(operator: Any, operator_client: Any, recipient: Any, other_recipient: Any) -> None:
    message = send(operator, to={"users": [recipient, other_recipient]})
    services.inbox_mark_read(user=other_recipient, item_id=message.ref)
    response = operator_client.get(f"/api/v1/manage/messages/{message.pk}/unread-recipients/", {"format": "csv"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows == [["id", "username"], [str(recipient.pk), recipient.username]]
    bad = operator_client.get(f"/api/v1/manage/messages/{message.pk}/unread-recipients/", {"format": "xml"})
    assert_error(bad, 400)


def test_bad_input(operator: Any, operator_client: Any, recipient: Any) -> None:
    assert_error(operator_client.get("/api/v1/manage/messages/999999/unread-recipients/"), 404)
    assert_error(operator_client.post("/api/v1/manage/bulletins/999999/remind/", {}, format="json"), 404)
    assert_error(operator_client.get("/api/v1/manage/messages/abc/unread-recipients/"), 400)
    message = send(operator, to={"users": [recipient]})
    path = f"/api/v1/manage/messages/{message.pk}/unread-recipients/"
    assert_error(operator_client.get(path, {"cursor": "forged"}), 400, "invalid_cursor")
    other = send(operator, to={"users": [recipient]})
    first = operator_client.get(f"/api/v1/manage/messages/{other.pk}/unread-recipients/", {"limit": 1}).json()
    assert first["next_cursor"] is None  # one user: nothing more
    scheduled = services.message_send(
        sender=operator,
        category="system",
        title="Later",
        body_html="<p>x</p>",
        send_at=timezone.now() + timedelta(hours=1),
        user_ids=[recipient.pk],
    )
    assert_error(operator_client.get(f"/api/v1/manage/messages/{scheduled.pk}/unread-recipients/"), 409, "not_sent")
    before = Message.objects.count()
    assert_error(operator_client.post(f"/api/v1/manage/messages/{scheduled.pk}/remind/", {}, format="json"), 409)
    response = operator_client.post(f"/api/v1/manage/messages/{message.pk}/remind/", {"extra": 1}, format="json")
    assert_error(response, 400)
    assert Message.objects.count() == before


def test_remind_sends_only_to_non_readers(
    operator: Any, operator_client: Any, recipient: Any, other_recipient: Any
) -> None:
    late = UserFactory()
    message = send(operator, to={"users": [recipient, other_recipient, late]}, title="Inventory")
    services.inbox_mark_read(user=recipient, item_id=message.ref)
    path = f"/api/v1/manage/messages/{message.pk}/remind/"
    response = operator_client.post(path, {"idempotency_key": "remind-1"}, format="json")
    assert response.status_code == 202, response.content
    reminder = Message.objects.get(pk=response.json()["id"])
    assert reminder.title == "Reminder: Inventory"
    assert reminder.audience == BitMap([other_recipient.pk, late.pk])
    assert reminder.status in (MessageStatus.QUEUED, MessageStatus.DELIVERED)
    # Delivered through the ordinary path: in the non-readers' inboxes, not the reader's.
    assert services.inbox_mark_read(user=late, item_id=reminder.ref)
    assert not PendingDelivery.objects.filter(object_id=reminder.pk).exists()
    with pytest.raises(NotFound):
        services.inbox_mark_read(user=recipient, item_id=reminder.ref)
    audit = AuditEntry.objects.filter(object_type="messagecenter.message")
    assert {(e.action, e.object_id) for e in audit} >= {("remind", str(message.pk)), ("create", str(reminder.pk))}
    # The same key: no second reminder, the first answered again.
    again = operator_client.post(path, {}, format="json", HTTP_IDEMPOTENCY_KEY="remind-1")
    assert (again.status_code, again.json()["id"]) == (200, str(reminder.pk))
    # Everyone reads it: a clear 409 and nothing sent.
    services.inbox_mark_read(user=other_recipient, item_id=message.ref)
    services.inbox_mark_read(user=late, item_id=message.ref)
    count = Message.objects.count()
    assert_error(operator_client.post(path, {}, format="json"), 409, "all_read")
    assert Message.objects.count() == count


def test_bulletin_remind(operator: Any, operator_client: Any, recipient: Any, other_recipient: Any, clock: Any) -> None:
    bulletin = make_bulletin(
        operator, make_group("floor", recipient, other_recipient), title="Fire drill", body_html="<p>At noon</p>"
    )
    services.inbox_mark_read(user=other_recipient, item_id=bulletin.ref)
    response = operator_client.post(f"/api/v1/manage/bulletins/{bulletin.pk}/remind/", {}, format="json")
    assert response.status_code == 202, response.content
    reminder = Message.objects.get(pk=response.json()["id"])
    assert (reminder.title, reminder.category, reminder.audience) == (
        "Reminder: Fire drill",
        "system",
        BitMap([recipient.pk]),
    )


def test_remind_permissions(operator: Any, anon_client: Any, recipient_client: Any, recipient: Any) -> None:
    message = send(operator, to={"users": [recipient]})
    path = f"/api/v1/manage/messages/{message.pk}/remind/"
    only_send = StaffFactory(username="sender-only")
    only_send.user_permissions.add(Permission.objects.get(codename="add_message"))
    only_view = StaffFactory(username="viewer-only")
    only_view.user_permissions.add(Permission.objects.get(codename="view_message"))
    allowed = StaffFactory(username="reminder")
    allowed.user_permissions.add(*Permission.objects.filter(codename__in=["add_message", "view_message"]))
    for client, status in (
        (anon_client, 401),
        (recipient_client, 403),
        (client_for(StaffFactory(username="stan")), 403),
        (client_for(only_send), 403),
        (client_for(only_view), 403),
    ):
        assert_error(client.post(path, {}, format="json"), status)
    assert Message.objects.count() == 1
    assert client_for(allowed).post(path, {}, format="json").status_code == 202
    assert client_for(operator).post(path, {}, format="json").status_code == 202
