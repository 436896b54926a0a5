"""Admin compose page: an explicit audience (users, groups or everyone, confirmed
with its size), autocomplete pickers, the sanitised live preview, a test send to
oneself and scheduled sends; the bulletin form's explicit "everyone"."""

import json
import re
from typing import Any

import pytest
from django.test import Client

from audit.models import AuditEntry
from messagecenter.models import Bulletin, Message, MessageStatus
from messagecenter.selectors import inbox_counts
from tests.factories import StaffFactory, UserFactory
from tests.messagecenter.conftest import make_group

pytestmark = pytest.mark.django_db(transaction=True)

ADD = "/admin/messagecenter/message/add/"
PREVIEW = "/admin/messagecenter/message/compose/preview/"
AUTOCOMPLETE = "/admin/autocomplete/"
CONTENT = {"category": "system", "title": "Sale", "body_html": "<p>Now</p>"}


@pytest.fixture
def admin_client(operator: Any) -> Client:
    client = Client()
    client.force_login(operator)
    return client


@pytest.fixture
def outsider_client(outsider: Any) -> Client:
    client = Client()
    client.force_login(outsider)
    return client


def _unread(user: Any) -> int:
    return int(inbox_counts(user=user)["unread"])


def test_empty_audience_is_an_error_and_sends_nothing(admin_client: Client, recipient: Any, clock: Any) -> None:
    response = admin_client.post(ADD, {**CONTENT, "_send": "1"})
    assert response.status_code == 200
    assert "Choose users, groups or everyone." in response.content.decode()
    assert not Message.objects.exists()
    assert _unread(recipient) == 0


def test_a_typed_name_is_not_a_valid_choice(admin_client: Client, recipient: Any, clock: Any) -> None:
    response = admin_client.post(ADD, {**CONTENT, "users": ["alice", str(recipient.pk)], "_send": "1"})
    assert response.status_code == 200
    assert "is not a valid value." in response.content.decode()
    assert not Message.objects.exists()


def test_everyone_with_users_is_an_error(admin_client: Client, recipient: Any, clock: Any) -> None:
    response = admin_client.post(ADD, {**CONTENT, "users": [recipient.pk], "everyone": "on", "_send": "1"})
    assert response.status_code == 200
    assert "Everyone already includes every user" in response.content.decode()
    assert not Message.objects.exists()


def test_everyone_needs_a_confirmation_showing_the_count(
    admin_client: Client, operator: Any, recipient: Any, other_recipient: Any, clock: Any
) -> None:
    UserFactory(username="gone", is_active=False)  # not counted: inactive
    response = admin_client.post(ADD, {**CONTENT, "everyone": "on", "_send": "1"})
    assert response.status_code == 200
    page = response.content.decode()
    assert "everyone: 3 active users" in page  # operator, alice, bob
    assert 'name="confirm_everyone" value="1"' in page
    assert "Confirm and send" in page
    assert not Message.objects.exists()
    assert _unread(recipient) == 0

    # "Preview audience" shows the same count and confirms it for the next "Send".
    preview = admin_client.post(ADD, {**CONTENT, "everyone": "on", "_preview": "1"}).content.decode()
    assert "everyone (3 active users)" in preview
    assert 'name="confirm_everyone" value="1"' in preview
    assert not Message.objects.exists()

    response = admin_client.post(ADD, {**CONTENT, "everyone": "on", "_send": "1", "confirm_everyone": "1"})
    assert response.status_code == 302
    message = Message.objects.get()
    assert message.everyone
    assert message.status != MessageStatus.SCHEDULED
    assert _unread(recipient) == 1
    assert _unread(other_recipient) == 1
    assert AuditEntry.objects.filter(action="create", source="admin", object_id=str(message.pk)).count() == 1


def test_groups_need_a_confirmation_showing_the_members(
    admin_client: Client, recipient: Any, other_recipient: Any, outsider: Any, clock: Any
) -> None:
    first = make_group("first", recipient, other_recipient)
    second = make_group("second", other_recipient)
    form = {**CONTENT, "groups": [first.pk, second.pk], "_send": "1"}
    response = admin_client.post(ADD, form)
    page = response.content.decode()
    assert "2 members in total" in page  # bob is in both and counts once
    assert f'name="confirm_groups" value="{first.pk},{second.pk}"' in page
    assert not Message.objects.exists()
    # A confirmation for other groups does not count.
    response = admin_client.post(ADD, {**form, "confirm_groups": str(first.pk)})
    assert response.status_code == 200
    assert not Message.objects.exists()
    response = admin_client.post(ADD, {**form, "confirm_groups": f"{first.pk},{second.pk}"})
    assert response.status_code == 302
    assert _unread(recipient) == 1
    assert _unread(other_recipient) == 1
    assert _unread(outsider) == 0


def test_picked_users_are_sent_without_confirmation(
    admin_client: Client, recipient: Any, other_recipient: Any, clock: Any
) -> None:
    response = admin_client.post(ADD, {**CONTENT, "users": [recipient.pk], "_send": "1"})
    assert response.status_code == 302
    assert _unread(recipient) == 1
    assert _unread(other_recipient) == 0


def test_compose_page_uses_autocomplete_widgets(admin_client: Client) -> None:
    page = admin_client.get(ADD).content.decode()
    assert 'data-ajax--url="/admin/autocomplete/"' in page
    assert 'data-field-name="sender"' in page  # users, through Message.sender
    assert 'data-field-name="groups"' in page
    assert "admin/js/autocomplete.js" in page
    assert "messagecenter/compose.js" in page


def test_autocomplete_finds_users_and_groups_for_staff_only(
    admin_client: Client, outsider_client: Client, recipient: Any, other_recipient: Any
) -> None:
    group = make_group("vip-customers")
    users = admin_client.get(
        AUTOCOMPLETE, {"term": "ali", "app_label": "messagecenter", "model_name": "message", "field_name": "sender"}
    )
    assert users.status_code == 200
    assert [r["id"] for r in users.json()["results"]] == [str(recipient.pk)]
    groups = admin_client.get(
        AUTOCOMPLETE, {"term": "vip", "app_label": "messagecenter", "model_name": "message", "field_name": "groups"}
    )
    assert groups.status_code == 200
    assert groups.json()["results"] == [{"id": str(group.pk), "text": "vip-customers"}]
    denied = outsider_client.get(
        AUTOCOMPLETE, {"term": "ali", "app_label": "messagecenter", "model_name": "message", "field_name": "sender"}
    )
    assert denied.status_code == 302
    assert "/admin/login/" in denied["Location"]


def test_preview_endpoint_sanitises_and_is_staff_only(admin_client: Client, outsider_client: Client) -> None:
    body = '<p>Hi <strong>you</strong> <a href="https://x.test">x</a></p><script>alert(1)</script><img src=x onerror=y>'
    response = admin_client.post(PREVIEW, {"body_html": body})
    assert response.status_code == 200
    html = json.loads(response.content)["html"]
    assert "<script" not in html
    assert "alert(1)" not in html
    assert "onerror" not in html
    assert "<strong>you</strong>" in html
    assert 'href="https://x.test"' in html
    assert admin_client.get(PREVIEW).status_code == 405
    denied = outsider_client.post(PREVIEW, {"body_html": body})
    assert denied.status_code == 302
    assert "/admin/login/" in denied["Location"]


def test_staff_without_the_permissions_gets_403(recipient: Any) -> None:
    client = Client()
    client.force_login(StaffFactory(username="intern"))
    assert client.post(PREVIEW, {"body_html": "<p>x</p>"}).status_code == 403
    assert client.get(ADD).status_code == 403
    denied = client.get(
        AUTOCOMPLETE, {"term": "ali", "app_label": "messagecenter", "model_name": "message", "field_name": "sender"}
    )
    assert denied.status_code == 403


def test_compose_page_renders_the_sanitised_preview_as_html(admin_client: Client, clock: Any) -> None:
    body = "<p>Big <strong>news</strong></p><script>alert(1)</script>"
    page = admin_client.post(ADD, {**CONTENT, "body_html": body, "everyone": "on", "_preview": "1"}).content.decode()
    preview = page.split('id="body-preview"', 1)[1].split("</div>", 1)[0]
    assert "<p>Big <strong>news</strong></p>" in preview
    assert "script" not in preview
    assert not Message.objects.exists()


def test_test_send_reaches_only_the_operator(admin_client: Client, operator: Any, recipient: Any, clock: Any) -> None:
    group = make_group("vip", recipient)
    response = admin_client.post(ADD, {**CONTENT, "groups": [group.pk], "everyone": "", "_test_send": "1"})
    assert response.status_code == 200
    assert "Test sent to you only" in response.content.decode()
    message = Message.objects.get()
    assert message.title == "[Test] Sale"
    assert not message.everyone
    assert _unread(operator) == 1
    assert _unread(recipient) == 0
    # No audience is needed for a test send.
    response = admin_client.post(ADD, {**CONTENT, "_test_send": "1"})
    assert response.status_code == 200
    assert Message.objects.count() == 2
    assert _unread(operator) == 2
    assert AuditEntry.objects.filter(action="create", source="admin").count() == 2


def test_send_at_schedules_and_nobody_gets_it_yet(
    admin_client: Client, recipient: Any, other_recipient: Any, clock: Any
) -> None:
    response = admin_client.post(
        ADD, {**CONTENT, "users": [recipient.pk, other_recipient.pk], "send_at": "2026-11-23 09:00", "_send": "1"}
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    message = Message.objects.get()
    assert message.status == MessageStatus.SCHEDULED
    assert message.send_at is not None
    assert message.send_at.isoformat() == "2026-11-23T09:00:00+00:00"
    assert _unread(recipient) == 0
    assert _unread(other_recipient) == 0
    response = admin_client.post(ADD, {**CONTENT, "users": [recipient.pk], "send_at": "2026-11-01 09:00", "_send": "1"})
    assert response.status_code == 200
    assert "send_at must be in the future." in response.content.decode()
    assert Message.objects.count() == 1


def _bulletin(**extra: Any) -> dict[str, Any]:
    return {
        "title": "Hello",
        "body_html": "<p>x</p>",
        "display_time_0": "2026-11-22",
        "display_time_1": "09:00:00",
        **extra,
    }


def test_bulletin_needs_groups_or_an_explicit_everyone(admin_client: Client, recipient: Any, clock: Any) -> None:
    response = admin_client.post("/admin/messagecenter/bulletin/add/", _bulletin())
    assert response.status_code == 200
    assert "Choose groups or everyone." in response.content.decode()
    assert not Bulletin.objects.exists()
    group = make_group("vip")
    response = admin_client.post("/admin/messagecenter/bulletin/add/", _bulletin(groups=[group.pk], everyone="on"))
    assert response.status_code == 200
    assert not Bulletin.objects.exists()
    response = admin_client.post("/admin/messagecenter/bulletin/add/", _bulletin(everyone="on"))
    assert response.status_code == 302
    bulletin = Bulletin.objects.get()
    assert not bulletin.groups.exists()  # stored as before: no groups is everyone
    assert inbox_counts(user=recipient)["by_category"]["system"] == 1
    page = admin_client.get(f"/admin/messagecenter/bulletin/{bulletin.pk}/change/").content.decode()
    assert re.search(r"<input[^>]*name=\"everyone\"[^>]*checked", page)


def test_autocomplete_and_compose_leave_out_inactive_users(admin_client: Client, recipient: Any) -> None:
    gone = UserFactory(username="alina-left", is_active=False)
    users = admin_client.get(
        AUTOCOMPLETE, {"term": "ali", "app_label": "messagecenter", "model_name": "message", "field_name": "sender"}
    )
    assert [r["id"] for r in users.json()["results"]] == [str(recipient.pk)]
    # The user list still finds the deactivated account (operators reactivate it there).
    assert "alina-left" in admin_client.get("/admin/auth/user/", {"q": "alina"}).content.decode()
    # Posting the id by hand is a form error, and nothing is sent.
    before = Message.objects.count()
    response = admin_client.post(ADD, {**CONTENT, "users": [gone.pk], "_send": "1"})
    assert response.status_code == 200
    assert "users" in response.context["form"].errors
    assert Message.objects.count() == before
