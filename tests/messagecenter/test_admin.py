"""Admin: groups with pasted member lists, bulletins and the message composer
(audience preview, send, progress, retract), all through the services."""

from datetime import timedelta
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from audit.models import AuditEntry
from messagecenter.models import Bulletin, Message, MessageStatus, PendingDelivery, UserGroup
from messagecenter.selectors import inbox_counts
from tests.factories import UserFactory
from tests.messagecenter.conftest import make_group

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def admin_client(operator: Any) -> Client:
    client = Client()
    client.force_login(operator)
    return client


def test_group_members_pasted_by_username_or_id(admin_client: Client, recipient: Any, other_recipient: Any) -> None:
    carol = UserFactory(username="carol")
    response = admin_client.post(
        "/admin/messagecenter/usergroup/add/",
        {"name": "vip", "add_members": f"alice, bob\n{carol.pk}", "remove_members": "", **_inline_management()},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    group = UserGroup.objects.get(name="vip")
    assert set(group.members.values_list("username", flat=True)) == {"alice", "bob", "carol"}
    response = admin_client.post(
        f"/admin/messagecenter/usergroup/{group.pk}/change/",
        {"name": "vip", "add_members": "", "remove_members": "bob", **_inline_management()},
    )
    assert response.status_code == 302
    assert set(group.members.values_list("username", flat=True)) == {"alice", "carol"}
    response = admin_client.post(
        f"/admin/messagecenter/usergroup/{group.pk}/change/",
        {"name": "vip", "add_members": "ghost", "remove_members": "", **_inline_management()},
    )
    assert response.status_code == 200
    assert "Unknown user(s): ghost" in response.content.decode()
    assert admin_client.get("/admin/messagecenter/usergroup/").status_code == 200


def _inline_management() -> dict[str, Any]:
    """The members inline's management form, posting no inline rows."""
    prefix = "memberships"
    return {
        f"{prefix}-TOTAL_FORMS": "0",
        f"{prefix}-INITIAL_FORMS": "0",
        f"{prefix}-MIN_NUM_FORMS": "0",
        f"{prefix}-MAX_NUM_FORMS": "0",
    }


def test_bulletin_admin_goes_through_services(admin_client: Client, recipient: Any, clock: Any) -> None:
    group = make_group("vip", recipient)
    response = admin_client.post(
        "/admin/messagecenter/bulletin/add/",
        {
            "title": "Hello",
            "body_html": "<p>x</p><script>y</script>",
            "display_time_0": "2026-11-22",
            "display_time_1": "09:00:00",
            "groups": [group.pk],
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    bulletin = Bulletin.objects.get()
    assert "<script>" not in bulletin.body_html
    assert inbox_counts(user=recipient)["by_category"]["system"] == 1
    response = admin_client.post(f"/admin/messagecenter/bulletin/{bulletin.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert inbox_counts(user=recipient)["unread"] == 0


def test_compose_preview_then_send_then_progress(
    admin_client: Client, recipient: Any, other_recipient: Any, clock: Any, settings: Any
) -> None:
    settings.MESSAGECENTER_FANOUT_CHUNK = 1
    group = make_group("vip", recipient, other_recipient)
    form = {
        "category": "promotion",
        "title": "Sale",
        "body_html": "<p>Now</p>",
        "image_urls": "https://cdn.test/a.png",
        "groups": [group.pk],
    }
    response = admin_client.post("/admin/messagecenter/message/add/", {**form, "_preview": "1"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "2 users" in html
    assert "delivery by push" in html
    assert f'name="confirm_groups" value="{group.pk}"' in html  # the preview confirms the groups
    assert not Message.objects.exists()
    upload = SimpleUploadedFile("pic.png", b"\x89PNG\r\n", content_type="image/png")
    response = admin_client.post(
        "/admin/messagecenter/message/add/",
        {**form, "_send": "1", "confirm_groups": str(group.pk), "image_files": upload},
    )
    assert response.status_code == 302
    message = Message.objects.get()
    assert message.image_files.count() == 1
    page = admin_client.get(f"/admin/messagecenter/message/{message.pk}/change/").content.decode()
    assert "2 / 2 (100%)" in page
    assert inbox_counts(user=recipient)["by_category"]["promotion"] == 1
    from messagecenter.selectors import inbox_item_get

    images = inbox_item_get(user=recipient, item_id=f"m{message.pk}").images
    assert images[0] == "https://cdn.test/a.png"
    assert len(images) == 2
    response = admin_client.post(
        "/admin/messagecenter/message/", {"action": "retract", "_selected_action": [message.pk]}
    )
    assert response.status_code == 302
    assert Message.objects.get().status == MessageStatus.RETRACTED
    assert inbox_counts(user=recipient)["unread"] == 0


def test_compose_errors_are_shown(admin_client: Client, clock: Any) -> None:
    response = admin_client.post(
        "/admin/messagecenter/message/add/",
        {"category": "system", "title": "x", "body_html": "b", "users": "999999999", "_send": "1"},
    )
    assert response.status_code == 200
    assert "Select a valid choice. 999999999 is not one of the available choices." in response.content.decode()
    response = admin_client.post(
        "/admin/messagecenter/message/add/", {"category": "system", "title": "x", "body_html": "b", "_send": "1"}
    )
    assert "Choose users, groups or everyone." in response.content.decode()
    assert not Message.objects.exists()
    assert admin_client.get("/admin/messagecenter/message/").status_code == 200
    assert admin_client.get("/admin/messagecenter/message/add/").status_code == 200


def test_pending_deliveries_are_listed_read_only_and_can_be_made_due(admin_client: Client, clock: Any) -> None:
    later = timezone.now() + timedelta(hours=1)
    row = PendingDelivery.objects.create(
        task="messagecenter.deliver", object_id=10**9, due_at=later, attempts=3, last_error="ConnectionError: down"
    )
    listing = admin_client.get("/admin/messagecenter/pendingdelivery/")
    assert listing.status_code == 200
    assert "ConnectionError: down" in listing.content.decode()
    assert admin_client.get("/admin/messagecenter/pendingdelivery/add/").status_code == 403
    answer = admin_client.post(
        "/admin/messagecenter/pendingdelivery/", {"action": "due_now", "_selected_action": [row.pk]}, follow=True
    )
    assert answer.status_code == 200
    row.refresh_from_db()
    assert row.due_at <= timezone.now()
    assert PendingDelivery.objects.filter(pk=row.pk).exists()  # never deleted from here
    assert AuditEntry.objects.filter(action="due_now", object_id=str(row.pk), source="admin").count() == 1
