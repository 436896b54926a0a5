"""Scheduled sends (``send_at``) of messages and notifications: stored,
reaching nobody until their time, sent exactly once by the due job, edited or
cancelled before, refused (409) after; bad input changes nothing; the admin
filter; permissions."""

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client

from messagecenter import services
from messagecenter.models import Message, MessageStatus, Notification, PendingDelivery
from tests.conftest import assert_error, client_for
from tests.factories import StaffFactory
from tests.messagecenter.conftest import ids, make_group

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGES = "/api/v1/manage/messages/"
NOTIFY = "/api/v1/manage/notifications/"


def _schedule(client: Any, to: dict[str, Any], send_at: Any, **extra: Any) -> Any:
    body = {"category": "system", "title": "Later", "body_html": "<p>Soon</p>", "to": to, "send_at": send_at}
    return client.post(MESSAGES, {**body, **extra}, format="json")


def test_scheduled_message_reaches_nobody_until_due_then_once(
    operator_client: Any, recipient: Any, other_recipient: Any, clock: Any
) -> None:
    group = make_group("night", other_recipient)
    send_at = clock.now + timedelta(hours=1)
    response = _schedule(operator_client, {"users": [recipient.pk], "groups": [group.pk]}, send_at.isoformat())
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "scheduled"
    assert body["send_at"] == send_at.isoformat()
    assert body["recipients"] == 2
    assert set(body) >= {"id", "delivery", "recipients", "status", "send_at"}
    alice, bob = client_for(recipient), client_for(other_recipient)
    assert ids(alice.get("/api/v1/inbox/")) == []
    assert_error(alice.get(f"/api/v1/inbox/m{body['id']}/"), 404)
    assert not PendingDelivery.objects.exists()

    assert services.scheduled_send_due() == 0  # not yet
    clock.advance(minutes=59)
    assert services.scheduled_send_due() == 0
    assert ids(alice.get("/api/v1/inbox/")) == []

    clock.advance(minutes=2)
    assert services.scheduled_send_due() == 1
    assert ids(alice.get("/api/v1/inbox/")) == [f"m{body['id']}"]
    assert ids(bob.get("/api/v1/inbox/")) == [f"m{body['id']}"]
    message = Message.objects.get()
    assert message.status == MessageStatus.DELIVERED
    assert message.created_at == clock.now  # it arrives as new, at the top
    assert message.slot_month != 0
    assert services.scheduled_send_due() == 0  # exactly once
    assert alice.get("/api/v1/inbox/counts/").json()["unread"] == 1

    # Sent: edits are refused, nothing changed.
    assert_error(operator_client.patch(f"{MESSAGES}{body['id']}/", {"title": "New"}, format="json"), 409)
    assert Message.objects.get().title == "Later"


def test_audience_resolved_at_send_time(operator_client: Any, recipient: Any, other_recipient: Any, clock: Any) -> None:
    group = make_group("late-joiners", recipient)
    response = _schedule(operator_client, {"groups": [group.pk]}, (clock.now + timedelta(minutes=5)).isoformat())
    services.user_group_add_members(group=group, user_ids=[other_recipient.pk])
    clock.advance(minutes=6)
    services.scheduled_send_due()
    assert ids(client_for(other_recipient).get("/api/v1/inbox/")) == [f"m{response.json()['id']}"]


def test_cancel_before_it_passes(operator_client: Any, recipient: Any, clock: Any) -> None:
    response = _schedule(operator_client, {"users": [recipient.pk]}, (clock.now + timedelta(minutes=5)).isoformat())
    message_id = response.json()["id"]
    assert operator_client.delete(f"{MESSAGES}{message_id}/").status_code == 204
    assert Message.objects.get().status == MessageStatus.CANCELLED
    clock.advance(minutes=10)
    assert services.scheduled_send_due() == 0
    assert ids(client_for(recipient).get("/api/v1/inbox/")) == []
    assert_error(operator_client.patch(f"{MESSAGES}{message_id}/", {"title": "x"}, format="json"), 409)


def test_edit_before_it_passes(operator_client: Any, recipient: Any, other_recipient: Any, clock: Any) -> None:
    response = _schedule(operator_client, {"users": [recipient.pk]}, (clock.now + timedelta(minutes=5)).isoformat())
    path = f"{MESSAGES}{response.json()['id']}/"
    later = clock.now + timedelta(minutes=30)
    edit = {"title": "Moved", "body_html": "<p>New</p><script>x</script>", "send_at": later.isoformat()}
    edit["to"] = {"users": [other_recipient.pk]}
    answer = operator_client.patch(path, edit, format="json")
    assert answer.status_code == 200, answer.content
    assert (answer.json()["status"], answer.json()["send_at"]) == ("scheduled", later.isoformat())
    message = Message.objects.get()
    assert (message.title, message.send_at) == ("Moved", later)
    assert "script" not in message.body_html
    clock.advance(minutes=10)
    assert services.scheduled_send_due() == 0  # the old time passed: nothing
    clock.advance(minutes=25)
    assert services.scheduled_send_due() == 1
    assert ids(client_for(recipient).get("/api/v1/inbox/")) == []
    items = client_for(other_recipient).get("/api/v1/inbox/").json()["results"]
    assert [i["title"] for i in items] == ["Moved"]


@pytest.mark.parametrize(
    ("send_at", "extra"),
    [
        (lambda now: (now - timedelta(seconds=1)).isoformat(), {}),
        (lambda now: now.isoformat(), {}),
        (lambda now: (now + timedelta(days=366)).isoformat(), {}),
        (lambda now: "tomorrow", {}),
        (lambda now: 12345, {}),
        (lambda now: (now + timedelta(hours=2)).isoformat(), {"expire_at": "2026-11-22T11:00:00+00:00"}),
        (lambda now: (now + timedelta(hours=1)).isoformat(), {"to": {"users": [987654]}}),
    ],
)
def test_bad_send_at_is_400_and_changes_nothing(
    operator_client: Any, recipient: Any, clock: Any, send_at: Any, extra: dict[str, Any]
) -> None:
    to = extra.pop("to", {"users": [recipient.pk]})
    response = _schedule(operator_client, to, send_at(clock.now), **extra)
    assert_error(response, 400)
    assert not Message.objects.exists()


def test_bad_edit_changes_nothing(operator_client: Any, recipient: Any, clock: Any) -> None:
    response = _schedule(operator_client, {"users": [recipient.pk]}, (clock.now + timedelta(minutes=5)).isoformat())
    path = f"{MESSAGES}{response.json()['id']}/"
    past = (clock.now - timedelta(minutes=1)).isoformat()
    assert_error(operator_client.patch(path, {"title": "x", "send_at": past}, format="json"), 400)
    assert_error(operator_client.patch(path, {"title": "x", "to": {"users": [987654]}}, format="json"), 400)
    assert_error(operator_client.patch(path, {"nonsense": 1}, format="json"), 400)
    assert Message.objects.get().title == "Later"
    assert_error(operator_client.patch(f"{MESSAGES}999999/", {"title": "x"}, format="json"), 404)


def test_an_immediate_message_answers_its_status(operator_client: Any, recipient: Any) -> None:
    body = {"category": "system", "title": "Now", "body_html": "x", "to": {"users": [recipient.pk]}}
    response = operator_client.post(MESSAGES, body, format="json")
    assert response.status_code == 202
    assert response.json()["send_at"] is None
    assert response.json()["status"] in {"queued", "delivering", "delivered"}
    # A sent message cannot be edited either.
    assert_error(operator_client.patch(f"{MESSAGES}{response.json()['id']}/", {"title": "x"}, format="json"), 409)


def test_concurrent_due_jobs_send_once(recipient: Any, operator: Any, clock: Any) -> None:
    services.message_send(
        sender=operator,
        category="system",
        title="Race",
        body_html="x",
        user_ids=[recipient.pk],
        send_at=clock.now + timedelta(seconds=5),
    )
    clock.advance(seconds=10)
    results: list[int] = []
    barrier = threading.Barrier(4)

    def run() -> None:
        barrier.wait()
        try:
            results.append(services.scheduled_send_due())
        finally:
            connection.close()

    if connection.vendor == "postgresql":
        threads = [threading.Thread(target=run) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:  # SQLite (embedded) has one writer anyway: the jobs run one after another
        results.extend(services.scheduled_send_due() for _ in range(4))
    assert sorted(results) == [0, 0, 0, 1]
    assert ids(client_for(recipient).get("/api/v1/inbox/")) == [f"m{Message.objects.get().pk}"]


@pytest.fixture
def stock(operator_client: Any, recipient: Any) -> None:
    operator_client.post("/api/v1/manage/message-types/", {"code": "stock", "name": "Stock"}, format="json")
    response = operator_client.post(
        "/api/v1/manage/subscriptions/", {"message_type": "stock", "scope": "w1", "user": recipient.pk}, format="json"
    )
    assert response.status_code == 201


def _notify(client: Any, send_at: Any, **extra: Any) -> Any:
    body = {"message_type": "stock", "scope": "w1", "title": "Low", "body_html": "x", "send_at": send_at}
    return client.post(NOTIFY, {**body, **extra}, format="json")


def test_scheduled_notification(operator_client: Any, recipient: Any, stock: None, clock: Any) -> None:
    response = _notify(operator_client, (clock.now + timedelta(minutes=10)).isoformat(), ttl_seconds=3600)
    assert response.status_code == 202, response.content
    body = response.json()
    assert (body["status"], body["recipients"]) == ("scheduled", 0)
    alice = client_for(recipient)
    assert ids(alice.get("/api/v1/inbox/")) == []
    path = f"{NOTIFY}{body['id']}/"
    assert operator_client.patch(path, {"title": "Very low"}, format="json").json()["status"] == "scheduled"
    clock.advance(minutes=11)
    assert services.scheduled_send_due() == 1
    items = alice.get("/api/v1/inbox/").json()["results"]
    assert [(i["id"], i["title"]) for i in items] == [(f"n{body['id']}", "Very low")]
    notification = Notification.objects.get()
    assert notification.expire_at - notification.created_at == timedelta(hours=1)
    assert notification.recipients == 1
    assert_error(operator_client.patch(path, {"title": "x"}, format="json"), 409)
    # DELETE after sending withdraws it from every inbox.
    assert operator_client.delete(path).status_code == 204
    assert ids(alice.get("/api/v1/inbox/")) == []


def test_scheduled_notification_cancel_and_bad_input(
    operator_client: Any, recipient: Any, stock: None, clock: Any
) -> None:
    assert_error(_notify(operator_client, (clock.now - timedelta(seconds=1)).isoformat()), 400)
    assert_error(_notify(operator_client, (clock.now + timedelta(days=400)).isoformat()), 400)
    assert_error(_notify(operator_client, (clock.now + timedelta(hours=1)).isoformat(), message_type="nope"), 400)
    assert not Notification.objects.exists()
    body = _notify(operator_client, (clock.now + timedelta(minutes=10)).isoformat()).json()
    assert operator_client.delete(f"{NOTIFY}{body['id']}/").status_code == 204
    clock.advance(minutes=20)
    assert services.scheduled_send_due() == 0
    assert ids(client_for(recipient).get("/api/v1/inbox/")) == []


def test_permissions(anon_client: Any, recipient_client: Any) -> None:
    paths = [("patch", f"{MESSAGES}1/", "change_message"), ("patch", f"{NOTIFY}1/", "change_notification")]
    paths.append(("delete", f"{NOTIFY}1/", "delete_notification"))
    staff = client_for(StaffFactory(username="stan"))
    for method, path, codename in paths:
        assert_error(getattr(anon_client, method)(path, {}, format="json"), 401)
        assert_error(getattr(recipient_client, method)(path, {}, format="json"), 403)
        assert_error(getattr(staff, method)(path, {}, format="json"), 403)
        allowed = StaffFactory(username=f"can-{codename}")
        allowed.user_permissions.add(Permission.objects.get(codename=codename, content_type__app_label="messagecenter"))
        assert_error(getattr(client_for(allowed), method)(path, {}, format="json"), 404)  # past the permission


def test_admin_filter_shows_what_is_scheduled(operator: Any, operator_client: Any, recipient: Any, clock: Any) -> None:
    _schedule(operator_client, {"users": [recipient.pk]}, (clock.now + timedelta(hours=1)).isoformat(), title="Wait")
    operator_client.post(
        MESSAGES,
        {"category": "system", "title": "Sent now", "body_html": "x", "to": {"users": [recipient.pk]}},
        format="json",
    )
    browser = Client()
    browser.force_login(operator)
    page = browser.get("/admin/messagecenter/message/", {"schedule": "waiting"}).content.decode()
    assert "Wait" in page
    assert "Sent now" not in page
