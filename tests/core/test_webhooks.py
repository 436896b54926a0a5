"""Webhooks against a real HTTP receiver on the loopback: signatures checked
with standardwebhooks' own verify, retries with backoff, disabling, the
outbox (a broker that is down loses nothing), the manage API and its
permissions, and refused URLs."""

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from celery import current_app
from django.contrib.auth.models import Permission
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from audit.models import AuditEntry
from messagecenter import services
from messagecenter.models import PendingDelivery
from messagecenter.services import delivery
from tests.conftest import assert_error, client_for
from tests.factories import StaffFactory, UserFactory
from webhooks import services as webhooks
from webhooks.models import WebhookDelivery, WebhookDeliveryStatus, WebhookEndpoint

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/v1/manage/webhooks/"


class Receiver:
    """A real HTTP server on 127.0.0.1 that records every request and answers ``status``."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.status = 204
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                receiver.requests.append((dict(self.headers.items()), self.rfile.read(length)))
                self.send_response(receiver.status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver(settings: Any) -> Iterator[Receiver]:
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    server = Receiver()
    yield server
    server.stop()


def _register(client: Any, url: str, events: list[str]) -> dict[str, Any]:
    response = client.post(URL, {"url": url, "events": events}, format="json")
    assert response.status_code == 201, response.content
    return dict(response.json())


def _send_message(client: Any, user: Any, **extra: Any) -> Any:
    body = {"category": "system", "title": "Hello", "body_html": "<p>Hi</p>", "to": {"users": [user.pk]}, **extra}
    return client.post("/api/v1/manage/messages/", body, format="json")


def test_delivery_is_signed_and_verifies(operator_client: Any, recipient: Any, receiver: Receiver) -> None:
    created = _register(operator_client, receiver.url, ["message.sent"])
    assert created["secret"].startswith("whsec_")
    # Shown once: the detail and the list never carry it.
    detail = operator_client.get(f"{URL}{created['id']}/").json()
    assert "secret" not in detail
    assert all("secret" not in row for row in operator_client.get(URL).json()["results"])

    response = _send_message(operator_client, recipient)
    assert response.status_code == 202
    assert len(receiver.requests) == 1
    headers, body = receiver.requests[0]
    payload = Webhook(created["secret"]).verify(body, headers)
    assert payload["type"] == "message.sent"
    assert payload["data"]["id"] == response.json()["id"]
    assert payload["data"]["recipients"] == 1
    assert headers["webhook-id"].startswith("msg_")
    # A wrong secret or a changed body does not verify.
    with pytest.raises(WebhookVerificationError):
        Webhook(webhooks.webhook_secret_new()).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(created["secret"]).verify(body.replace(b"Hello", b"Hellp"), headers)
    row = WebhookDelivery.objects.get()
    assert (row.status, row.attempts, row.last_status_code) == (WebhookDeliveryStatus.SUCCEEDED, 1, 204)


def test_only_subscribed_events_and_active_endpoints(operator_client: Any, recipient: Any, receiver: Receiver) -> None:
    _register(operator_client, receiver.url, ["bulletin.published"])
    off = _register(operator_client, receiver.url, ["message.sent"])
    assert operator_client.patch(f"{URL}{off['id']}/", {"active": False}, format="json").status_code == 200
    assert _send_message(operator_client, recipient).status_code == 202
    assert receiver.requests == []
    response = operator_client.post(
        "/api/v1/manage/bulletins/",
        {"title": "B", "body_html": "x", "display_time": timezone.now().isoformat()},
        format="json",
    )
    assert response.status_code == 201
    assert [json.loads(body)["type"] for _, body in receiver.requests] == ["bulletin.published"]


def test_other_events_reach_the_receiver(operator_client: Any, recipient: Any, receiver: Receiver) -> None:
    created = _register(operator_client, receiver.url, ["announcement.published", "notification.sent", "message.read"])
    operator_client.post(
        "/api/v1/manage/announcements/",
        {"title": "A", "body_html": "x", "platforms": ["user"]},
        format="json",
    )
    operator_client.post("/api/v1/manage/message-types/", {"code": "stock", "name": "Stock"}, format="json")
    operator_client.post(
        "/api/v1/manage/subscriptions/", {"message_type": "stock", "scope": "w1", "user": recipient.pk}, format="json"
    )
    operator_client.post(
        "/api/v1/manage/notifications/",
        {"message_type": "stock", "scope": "w1", "title": "Low", "body_html": "x"},
        format="json",
    )
    sent = _send_message(operator_client, recipient).json()
    assert client_for(recipient).post(f"/api/v1/inbox/m{sent['id']}/read/").status_code == 204
    services.inbox_first_reads_fold()
    payloads = [Webhook(created["secret"]).verify(body, headers) for headers, body in receiver.requests]
    assert [p["type"] for p in payloads] == ["announcement.published", "notification.sent", "message.read"]
    assert payloads[1]["data"]["recipients"] == 1
    assert payloads[2]["data"] == {"id": sent["id"], "first_reads": 1, "reads": 1, "audience": 1, "read_rate": 1.0}


def test_message_read_is_coalesced_counts_without_user_ids(
    operator_client: Any, recipient: Any, receiver: Receiver
) -> None:
    """One event per message per fold, however many users read it; counts only."""
    readers = [UserFactory() for _ in range(3)]
    _register(operator_client, receiver.url, ["message.read"])
    first = operator_client.post(
        "/api/v1/manage/messages/",
        {
            "category": "system",
            "title": "One",
            "body_html": "x",
            "to": {"users": [recipient.pk] + [u.pk for u in readers]},
        },
        format="json",
    ).json()
    second = _send_message(operator_client, recipient).json()
    for user in readers:
        services.inbox_mark_read(user=user, item_id=f"m{first['id']}")
    services.inbox_mark_read(user=recipient, item_id=f"m{second['id']}")
    services.inbox_first_reads_fold()
    events = [json.loads(body)["data"] for _, body in receiver.requests]
    assert sorted(events, key=lambda d: int(d["id"])) == [
        {"id": first["id"], "first_reads": 3, "reads": 3, "audience": 4, "read_rate": 0.75},
        {"id": second["id"], "first_reads": 1, "reads": 1, "audience": 1, "read_rate": 1.0},
    ]
    # The next fold's event carries the reads so far; no user id ever appears.
    services.inbox_mark_read(user=recipient, item_id=f"m{first['id']}")
    services.inbox_first_reads_fold()
    services.inbox_first_reads_fold()  # nothing new: no event
    last = [json.loads(body)["data"] for _, body in receiver.requests][2:]
    assert last == [{"id": first["id"], "first_reads": 1, "reads": 4, "audience": 4, "read_rate": 1.0}]
    bodies = b"".join(body for _, body in receiver.requests).decode()
    assert all(f'"{u.username}"' not in bodies for u in [recipient, *readers])
    assert '"user' not in bodies


def test_failures_retry_with_backoff_then_fail(
    operator_client: Any, recipient: Any, receiver: Receiver, settings: Any
) -> None:
    settings.WEBHOOK_RETRY_DELAYS = [10.0, 60.0]
    settings.WEBHOOK_DISABLE_AFTER_FAILURES = 100
    receiver.status = 500
    _register(operator_client, receiver.url, ["message.sent"])
    started = timezone.now()
    _send_message(operator_client, recipient)
    row = WebhookDelivery.objects.get()
    assert (row.status, row.attempts, row.last_status_code) == ("pending", 1, 500)
    # Due again after the first delay, not before: the relay leaves it alone now.
    assert started + timedelta(seconds=9) < row.next_attempt_at < timezone.now() + timedelta(seconds=11)
    assert webhooks.webhook_relay() == 0
    assert len(receiver.requests) == 1

    WebhookDelivery.objects.update(next_attempt_at=timezone.now())
    assert webhooks.webhook_relay() == 1
    row.refresh_from_db()
    assert (row.status, row.attempts) == ("pending", 2)
    assert row.next_attempt_at > timezone.now() + timedelta(seconds=55)  # the second, longer delay

    WebhookDelivery.objects.update(next_attempt_at=timezone.now())
    webhooks.webhook_relay()
    row.refresh_from_db()
    assert (row.status, row.attempts, row.last_status_code) == ("failed", 3, 500)
    assert "HTTP 500" in row.last_error
    assert len(receiver.requests) == 3
    # Every attempt carried the same webhook-id: a receiver can drop duplicates.
    assert len({headers["webhook-id"] for headers, _ in receiver.requests}) == 1


def test_endpoint_disabled_after_consecutive_failures(
    operator_client: Any, recipient: Any, receiver: Receiver, settings: Any
) -> None:
    settings.WEBHOOK_RETRY_DELAYS = [0.0, 0.0, 0.0, 0.0]
    settings.WEBHOOK_DISABLE_AFTER_FAILURES = 3
    receiver.status = 500
    created = _register(operator_client, receiver.url, ["message.sent"])
    _send_message(operator_client, recipient)
    _send_message(operator_client, recipient)
    assert WebhookEndpoint.objects.get().consecutive_failures == 2
    webhooks.webhook_relay()  # the third failure switches it off
    endpoint = WebhookEndpoint.objects.get()
    assert not endpoint.active
    assert endpoint.disabled_at is not None
    assert not WebhookDelivery.objects.filter(status="pending").exists()
    sent_before = len(receiver.requests)
    _send_message(operator_client, recipient)
    assert len(receiver.requests) == sent_before  # nothing for a disabled endpoint
    # Turned on again, its failures are forgiven and a success is recorded.
    receiver.status = 200
    response = operator_client.patch(f"{URL}{created['id']}/", {"active": True}, format="json")
    assert response.json()["consecutive_failures"] == 0
    _send_message(operator_client, recipient)
    assert WebhookDelivery.objects.filter(status="succeeded").count() == 1


def test_broker_down_loses_nothing(
    operator_client: Any, recipient: Any, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    _register(operator_client, receiver.url, ["message.sent"])
    task = current_app.tasks[webhooks.DELIVER_TASK]
    real = task.apply_async

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise BrokerError("broker down")

    monkeypatch.setattr(task, "apply_async", refuse)
    assert _send_message(operator_client, recipient).status_code == 202
    assert receiver.requests == []
    row = WebhookDelivery.objects.get()
    assert row.status == "pending"  # committed with the message
    monkeypatch.setattr(task, "apply_async", real)
    WebhookDelivery.objects.update(next_attempt_at=timezone.now())  # its lease ran out
    assert webhooks.webhook_relay() == 1
    assert len(receiver.requests) == 1
    assert WebhookDelivery.objects.get().status == "succeeded"


def test_rolled_back_event_sends_nothing(operator_client: Any, receiver: Receiver) -> None:
    _register(operator_client, receiver.url, ["message.sent"])
    # Unknown recipients: the send is refused, and no delivery exists for it.
    response = operator_client.post(
        "/api/v1/manage/messages/",
        {"category": "system", "title": "x", "body_html": "y", "to": {"users": [987654]}},
        format="json",
    )
    assert_error(response, 400)
    assert not WebhookDelivery.objects.exists()
    assert receiver.requests == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://example.com/x", "events": ["message.sent"]}, "url"),
        ({"url": "file:///etc/passwd", "events": ["message.sent"]}, "url"),
        ({"url": "not a url", "events": ["message.sent"]}, "url"),
        ({"url": "http://user:pw@example.com/", "events": ["message.sent"]}, "url"),
        ({"url": "https://example.com/x", "events": ["message.exploded"]}, "events"),
        ({"url": "https://example.com/x", "events": []}, "events"),
        ({"url": "https://example.com/x", "events": "message.sent"}, "events"),
        ({"url": "https://example.com/x"}, "events"),
    ],
)
def test_bad_input_is_400_and_changes_nothing(operator_client: Any, body: dict[str, Any], field: str) -> None:
    error = assert_error(operator_client.post(URL, body, format="json"), 400)
    assert field in error["fields"]
    assert not WebhookEndpoint.objects.exists()


# Endpoints on the machine itself or a private network; all but localhost are
# literal addresses, refused without any lookup.
PRIVATE_URLS = [
    "http://127.0.0.1:8000/hook",
    "http://localhost/hook",
    "http://10.0.0.5/hook",
    "http://192.168.1.1/hook",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://0.0.0.0/hook",
]


@pytest.mark.parametrize("url", PRIVATE_URLS)
def test_private_addresses_refused_unless_allowed(operator_client: Any, settings: Any, url: str) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    error = assert_error(operator_client.post(URL, {"url": url, "events": ["message.sent"]}, format="json"), 400)
    assert error["code"] == "invalid_url"
    assert not WebhookEndpoint.objects.exists()
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    assert operator_client.post(URL, {"url": url, "events": ["message.sent"]}, format="json").status_code == 201


def test_patch_validates_before_writing(operator_client: Any, receiver: Receiver, settings: Any) -> None:
    created = _register(operator_client, receiver.url, ["message.sent"])
    path = f"{URL}{created['id']}/"
    assert_error(operator_client.patch(path, {"url": "gopher://x", "events": ["delivery.failed"]}, format="json"), 400)
    assert_error(operator_client.patch(path, {"events": ["nope"]}, format="json"), 400)
    assert WebhookEndpoint.objects.get().events == ["message.sent"]
    response = operator_client.patch(path, {"events": ["delivery.failed", "message.read"]}, format="json")
    assert response.json()["events"] == ["delivery.failed", "message.read"]
    assert operator_client.delete(path).status_code == 204
    assert_error(operator_client.get(path), 404)
    assert_error(operator_client.delete(path), 404)


def test_list_pages_newest_first(operator_client: Any, receiver: Receiver) -> None:
    ids = [_register(operator_client, receiver.url, ["message.sent"])["id"] for _ in range(3)]
    first = operator_client.get(URL, {"limit": 2}).json()
    assert [r["id"] for r in first["results"]] == ids[::-1][:2]
    second = operator_client.get(URL, {"limit": 2, "cursor": first["next_cursor"]}).json()
    assert [r["id"] for r in second["results"]] == [ids[0]]
    assert second["next_cursor"] is None
    assert_error(operator_client.get(URL, {"cursor": "garbage"}), 400)
    assert_error(operator_client.get(URL, {"limit": 0}), 400)


def test_permissions(anon_client: Any, recipient_client: Any) -> None:
    endpoint = WebhookEndpoint.objects.create(url="https://example.com/h", events=["message.sent"], secret="whsec_x")
    calls = [
        ("get", URL, "view"),
        ("post", URL, "add"),
        ("get", f"{URL}{endpoint.pk}/", "view"),
        ("patch", f"{URL}{endpoint.pk}/", "change"),
        ("delete", f"{URL}{endpoint.pk}/", "delete"),
    ]
    staff = client_for(StaffFactory(username="stan"))
    for method, path, _ in calls:
        assert_error(getattr(anon_client, method)(path, {}, format="json"), 401)
        assert_error(getattr(recipient_client, method)(path, {}, format="json"), 403)
        assert_error(getattr(staff, method)(path, {}, format="json"), 403)
    for method, path, action in calls:
        user = StaffFactory(username=f"can-{action}-{method}")
        user.user_permissions.add(Permission.objects.get(codename=f"{action}_webhookendpoint"))
        response = getattr(client_for(user), method)(path, {}, format="json")
        assert response.status_code in {200, 204, 400}, (method, path, response.content)  # past the permission


def test_delivery_failed_event(settings: Any, receiver: Receiver, operator_client: Any) -> None:
    settings.MESSAGECENTER_DELIVERY_FAILED_EVENT_ATTEMPTS = 2
    created = _register(operator_client, receiver.url, ["delivery.failed"])
    PendingDelivery.objects.create(
        task="messagecenter.message_deliver", object_id=42, index=0, due_at=timezone.now(), attempts=1
    )
    delivery._note_failure("messagecenter.message_deliver", 42, 0, ConnectionError("redis gone"))
    delivery._note_failure("messagecenter.message_deliver", 42, 0, ConnectionError("redis gone"))  # once only
    payloads = [Webhook(created["secret"]).verify(body, headers) for headers, body in receiver.requests]
    assert [p["type"] for p in payloads] == ["delivery.failed"]
    assert payloads[0]["data"]["object_id"] == "42"
    assert "redis gone" in payloads[0]["data"]["error"]


def test_endpoint_writes_are_audited_without_the_secret(operator_client: Any, receiver: Receiver) -> None:
    created = _register(operator_client, receiver.url, ["message.sent"])
    endpoint_id = created["id"]
    assert operator_client.patch(f"{URL}{endpoint_id}/", {"active": False}, format="json").status_code == 200
    assert operator_client.delete(f"{URL}{endpoint_id}/").status_code == 204

    entries = list(
        AuditEntry.objects.filter(object_type="webhooks.webhookendpoint", object_id=str(endpoint_id)).order_by(
            "at", "id"
        )
    )
    assert [e.action for e in entries] == ["create", "update", "delete"]
    assert entries[0].changes["url"] == receiver.url
    assert entries[1].changes == {"active": False}
    assert created["secret"] not in json.dumps([e.changes for e in entries])
