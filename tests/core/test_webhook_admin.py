"""The webhook admin: the endpoint form refuses bad URLs and saves nothing,
a good endpoint is saved and audited, its signing secret is shown once (never
again, never in the log); the delivery log lists and retries deliveries, each
retry audited in the action's transaction."""

import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.test import Client
from django.utils import timezone

from audit.models import AuditEntry
from tests.factories import StaffFactory
from webhooks.models import WebhookDelivery, WebhookDeliveryStatus, WebhookEndpoint

pytestmark = pytest.mark.django_db

ADD = "/admin/webhooks/webhookendpoint/add/"
DELIVERIES = "/admin/webhooks/webhookdelivery/"


@pytest.fixture
def admin_client(operator: Any) -> Client:
    client = Client()
    client.force_login(operator)
    return client


def _form(url: str, **extra: Any) -> dict[str, Any]:
    return {"url": url, "description": "CRM", "events": ["message.sent", "message.read"], "active": "on", **extra}


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("not a url", "Enter a valid URL."),
        ("ftp://hooks.example.com/x", "Only http and https URLs are allowed."),
        ("https://user:pw@hooks.example.com/x", "Credentials in the URL are not allowed."),
        ("http://127.0.0.1:9/hook", "The host resolves to a private or reserved address."),
    ],
)
def test_add_with_a_bad_url_shows_the_error_and_saves_nothing(
    admin_client: Client, settings: Any, url: str, error: str
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    response = admin_client.post(ADD, _form(url))
    assert response.status_code == 200  # the form again, not a 500
    assert error in response.content.decode()
    assert response.context["adminform"].form.errors["url"] == [error]
    assert not WebhookEndpoint.objects.exists()
    assert not AuditEntry.objects.exists()


def test_add_with_unknown_or_no_events_saves_nothing(admin_client: Client, settings: Any) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    response = admin_client.post(ADD, _form("http://127.0.0.1:9/hook", events=["message.nope"]))
    assert response.status_code == 200
    assert "events" in response.context["adminform"].form.errors
    response = admin_client.post(ADD, _form("http://127.0.0.1:9/hook", events=[]))
    assert response.status_code == 200
    assert not WebhookEndpoint.objects.exists()
    assert not AuditEntry.objects.exists()


def test_add_saves_audits_and_shows_the_secret_once(admin_client: Client, operator: Any, settings: Any) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    response = admin_client.post(ADD, _form("http://127.0.0.1:9/hook"), follow=True)
    assert response.redirect_chain == [("/admin/webhooks/webhookendpoint/", 302)], response.content.decode()[:2000]
    endpoint = WebhookEndpoint.objects.get()
    assert (endpoint.url, endpoint.description, endpoint.active) == ("http://127.0.0.1:9/hook", "CRM", True)
    assert sorted(endpoint.events) == ["message.read", "message.sent"]
    assert endpoint.secret.startswith("whsec_")

    # Once: on the page the save leads to, as a warning.
    shown = [(m.level_tag, str(m)) for m in response.context["messages"]]
    assert ("warning", f"Signing secret (shown only now): {endpoint.secret}") in shown
    assert response.content.decode().count(endpoint.secret) == 1
    # Never again: not on the list, not on the change page, not after the next save.
    assert endpoint.secret not in admin_client.get("/admin/webhooks/webhookendpoint/").content.decode()
    change = f"/admin/webhooks/webhookendpoint/{endpoint.pk}/change/"
    assert endpoint.secret not in admin_client.get(change).content.decode()
    response = admin_client.post(change, _form("http://127.0.0.1:9/other", description="CRM 2"))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert not any("Signing secret" in str(m) for m in get_messages(response.wsgi_request))
    endpoint.refresh_from_db()
    assert endpoint.url == "http://127.0.0.1:9/other"
    assert endpoint.secret.startswith("whsec_")  # kept as it was

    created, updated = AuditEntry.objects.filter(object_type="webhooks.webhookendpoint").order_by("at", "id")
    assert (created.action, created.object_id, created.source) == ("create", str(endpoint.pk), "admin")
    assert created.actor_name == operator.username
    assert created.changes["url"] == "http://127.0.0.1:9/hook"
    assert sorted(created.changes["events"]) == ["message.read", "message.sent"]
    assert updated.action == "update"
    assert updated.changes == {
        "url": {"old": "http://127.0.0.1:9/hook", "new": "http://127.0.0.1:9/other"},
        "description": {"old": "CRM", "new": "CRM 2"},
    }
    assert endpoint.secret not in json.dumps([created.changes, updated.changes, created.object_repr])


def _delivery(endpoint: WebhookEndpoint, n: int, status: str = WebhookDeliveryStatus.FAILED) -> WebhookDelivery:
    now = timezone.now()
    return WebhookDelivery.objects.create(
        endpoint=endpoint,
        event="message.sent",
        message_id=f"msg_admin_{n}",
        payload={"type": "message.sent"},
        status=status,
        attempts=8,
        next_attempt_at=now,
        last_status_code=500,
        last_error="HTTP 500",
        finished_at=now,
    )


@pytest.fixture
def endpoint() -> WebhookEndpoint:
    return WebhookEndpoint.objects.create(
        url="https://hooks.example.com/mc", events=["message.sent"], secret="whsec_dGVzdA=="
    )


def test_delivery_log_lists_and_shows_deliveries(admin_client: Client, endpoint: WebhookEndpoint) -> None:
    failed = _delivery(endpoint, 1)
    _delivery(endpoint, 2, status=WebhookDeliveryStatus.SUCCEEDED)
    page = admin_client.get(DELIVERIES)
    assert page.status_code == 200
    assert [d.pk for d in page.context["cl"].result_list] == sorted(
        WebhookDelivery.objects.values_list("pk", flat=True), reverse=True
    )
    assert admin_client.get(DELIVERIES, {"status": "failed"}).context["cl"].result_count == 1
    assert admin_client.get(DELIVERIES, {"q": "msg_admin_1"}).context["cl"].result_count == 1
    detail = admin_client.get(f"{DELIVERIES}{failed.pk}/change/")
    assert detail.status_code == 200  # read-only view
    assert "HTTP 500" in detail.content.decode()
    assert endpoint.secret not in detail.content.decode()


def test_retry_makes_deliveries_due_and_is_audited(
    admin_client: Client, operator: Any, endpoint: WebhookEndpoint
) -> None:
    picked, other = _delivery(endpoint, 1), _delivery(endpoint, 2)
    response = admin_client.post(DELIVERIES, {"action": "retry", "_selected_action": [picked.pk]})
    assert response.status_code == 302
    assert "1 deliveries queued again." in [str(m) for m in get_messages(response.wsgi_request)]
    picked.refresh_from_db()
    assert (picked.status, picked.attempts, picked.finished_at) == (WebhookDeliveryStatus.PENDING, 0, None)
    other.refresh_from_db()
    assert (other.status, other.attempts) == (WebhookDeliveryStatus.FAILED, 8)
    [entry] = AuditEntry.objects.all()
    assert (entry.action, entry.object_type, entry.object_id) == ("retry", "webhooks.webhookdelivery", str(picked.pk))
    assert (entry.source, entry.actor_name, entry.path) == ("admin", operator.username, DELIVERIES)


def test_retry_rolls_back_when_its_entry_fails(
    admin_client: Client, endpoint: WebhookEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    picked = _delivery(endpoint, 1)

    def broken(**kwargs: Any) -> None:
        raise RuntimeError("audit store down")

    monkeypatch.setattr("audit.trail.audit_record", broken)
    with pytest.raises(RuntimeError):
        admin_client.post(DELIVERIES, {"action": "retry", "_selected_action": [picked.pk]})
    picked.refresh_from_db()
    assert (picked.status, picked.attempts) == (WebhookDeliveryStatus.FAILED, 8)


def test_bulk_delete_of_deliveries_is_audited(admin_client: Client, endpoint: WebhookEndpoint) -> None:
    rows = [_delivery(endpoint, 1), _delivery(endpoint, 2)]
    response = admin_client.post(
        DELIVERIES, {"action": "delete_selected", "_selected_action": [r.pk for r in rows], "post": "yes"}
    )
    assert response.status_code == 302
    assert not WebhookDelivery.objects.exists()
    assert sorted((e.action, e.object_id) for e in AuditEntry.objects.all()) == sorted(
        ("delete", str(r.pk)) for r in rows
    )


def test_retry_needs_the_change_permission(endpoint: WebhookEndpoint) -> None:
    viewer = StaffFactory(username="viewer")
    viewer.user_permissions.add(Permission.objects.get(codename="view_webhookdelivery"))
    client = Client()
    client.force_login(viewer)
    picked = _delivery(endpoint, 1)
    response = client.post(DELIVERIES, {"action": "retry", "_selected_action": [picked.pk]})
    assert response.status_code == 200  # Django answers "no action selected" with the list
    picked.refresh_from_db()
    assert picked.status == WebhookDeliveryStatus.FAILED
    assert not AuditEntry.objects.exists()
