"""The audit entries of the manage API's edits: message PATCH, notification
PATCH and DELETE each record one entry (action, object, what changed) in the
write's transaction; a refused write (400, 404, 409) records nothing."""

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from audit.models import AuditEntry
from messagecenter.models import Message, Notification
from tests.conftest import assert_error

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGES = "/api/v1/manage/messages/"
NOTIFY = "/api/v1/manage/notifications/"


def _later(**delta: int) -> str:
    return (timezone.now() + timedelta(**delta)).replace(microsecond=0).isoformat()


@pytest.fixture
def scheduled_message(operator_client: Any, recipient: Any) -> int:
    body = {"category": "system", "title": "Later", "body_html": "<p>Soon</p>", "to": {"users": [recipient.pk]}}
    response = operator_client.post(MESSAGES, {**body, "send_at": _later(days=1)}, format="json")
    assert response.status_code == 202, response.content
    return int(response.json()["id"])


@pytest.fixture
def scheduled_notification(operator_client: Any, recipient: Any) -> int:
    operator_client.post("/api/v1/manage/message-types/", {"code": "stock", "name": "Stock"}, format="json")
    operator_client.post(
        "/api/v1/manage/subscriptions/", {"message_type": "stock", "scope": "w1", "user": recipient.pk}, format="json"
    )
    body = {"message_type": "stock", "scope": "w1", "title": "Low", "body_html": "x", "send_at": _later(days=1)}
    response = operator_client.post(NOTIFY, body, format="json")
    assert response.status_code == 202, response.content
    return int(response.json()["id"])


def _after(entry_id: int) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(pk__gt=entry_id).order_by("at", "id"))


def _last_id() -> int:
    last = AuditEntry.objects.order_by("-id").first()
    return last.pk if last is not None else 0


def _assert_api_entry(entry: AuditEntry, *, action: str, model: str, pk: int, actor: Any, path: str) -> None:
    """The entry names the action, the row, the API as its source, the operator and the path."""
    assert (entry.action, entry.object_type, entry.object_id) == (action, f"messagecenter.{model}", str(pk))
    assert (entry.source, entry.actor_name, entry.path) == ("api", actor.username, path)


def test_message_patch_is_audited(operator: Any, operator_client: Any, scheduled_message: int) -> None:
    before = _last_id()
    send_at = _later(days=2)
    response = operator_client.patch(
        f"{MESSAGES}{scheduled_message}/", {"title": "Later still", "send_at": send_at}, format="json"
    )
    assert response.status_code == 200, response.content
    [entry] = _after(before)
    path = f"{MESSAGES}{scheduled_message}/"
    _assert_api_entry(entry, action="update", model="message", pk=scheduled_message, actor=operator, path=path)
    assert entry.object_repr == str(Message.objects.get(pk=scheduled_message))
    assert entry.changes == {"title": "Later still", "send_at": send_at.replace("+00:00", "Z")}


def test_message_patch_refused_records_nothing(operator_client: Any, scheduled_message: int) -> None:
    before = _last_id()
    path = f"{MESSAGES}{scheduled_message}/"
    assert_error(operator_client.patch(path, {"title": ""}, format="json"), 400)
    assert_error(operator_client.patch(path, {"send_at": "tomorrow"}, format="json"), 400)
    assert_error(operator_client.patch(path, {"colour": "red"}, format="json"), 400)
    assert_error(operator_client.patch(f"{MESSAGES}999999/", {"title": "x"}, format="json"), 404)
    assert _after(before) == []
    assert Message.objects.get(pk=scheduled_message).title == "Later"
    # Retracted (cancelled): an edit is refused with 409 and records nothing either.
    assert operator_client.delete(path).status_code == 204
    before = _last_id()
    assert_error(operator_client.patch(path, {"title": "Too late"}, format="json"), 409)
    assert _after(before) == []


def test_notification_patch_and_delete_are_audited(
    operator: Any, operator_client: Any, scheduled_notification: int
) -> None:
    path = f"{NOTIFY}{scheduled_notification}/"
    before = _last_id()
    response = operator_client.patch(path, {"title": "Very low", "ttl_seconds": 3600}, format="json")
    assert response.status_code == 200, response.content
    [update] = _after(before)
    _assert_api_entry(
        update, action="update", model="notification", pk=scheduled_notification, actor=operator, path=path
    )
    assert update.changes == {"title": "Very low", "ttl_seconds": 3600}

    before = _last_id()
    assert operator_client.delete(path).status_code == 204
    [delete] = _after(before)
    _assert_api_entry(
        delete, action="delete", model="notification", pk=scheduled_notification, actor=operator, path=path
    )
    assert delete.object_repr == str(Notification.objects.get(pk=scheduled_notification))
    assert delete.changes == {}


def test_notification_patch_refused_records_nothing(operator_client: Any, scheduled_notification: int) -> None:
    path = f"{NOTIFY}{scheduled_notification}/"
    before = _last_id()
    assert_error(operator_client.patch(path, {"ttl_seconds": 0}, format="json"), 400)
    assert_error(operator_client.patch(path, {"title": 7}, format="json"), 400)
    assert_error(operator_client.patch(path, {"send_at": _later(days=-1)}, format="json"), 400)
    assert_error(operator_client.patch(f"{NOTIFY}999999/", {"title": "x"}, format="json"), 404)
    assert_error(operator_client.delete(f"{NOTIFY}999999/"), 404)
    assert _after(before) == []
    assert Notification.objects.get(pk=scheduled_notification).title == "Low"
