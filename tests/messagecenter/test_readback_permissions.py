"""Who may read back: every new GET endpoint answers anonymous 401, a plain user
403, staff without the model's view permission 403, staff with it 200, a
superuser 200; refusals carry the error envelope and nothing of the data."""

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from messagecenter import services
from notices import services as notice_services
from tests.conftest import assert_error, client_for
from tests.factories import StaffFactory
from tests.messagecenter.conftest import make_group, send

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "Top-secret-title-7f3a"


@pytest.fixture
def world(operator: Any, recipient: Any) -> dict[str, Any]:
    """One object of each kind, all titled or named so a leak would show."""
    group = make_group("secret-group-7f3a", recipient)
    services.message_type_create(code="secret-type-7f3a", name=SECRET)
    subscription = services.subscription_create(
        message_type="secret-type-7f3a", scope="wh-1", user_id=recipient.pk, group_id=None
    )
    return {
        "announcement": notice_services.announcement_create(
            author=operator, title=SECRET, body_html="b", platforms=["user"]
        ),
        "bulletin": services.bulletin_create(
            title=SECRET, body_html="b", display_time=timezone.now(), group_ids=[], actor=operator
        ),
        "message": send(operator, to={"users": [recipient]}, title=SECRET),
        "group": group,
        "message_type": services.message_type_create(code="another-7f3a", name=SECRET),
        "subscription": subscription,
        "notification": services.notification_send(
            message_type="secret-type-7f3a", scope="wh-1", title=SECRET, body_html="b"
        ),
    }


def _endpoints(world: dict[str, Any]) -> list[tuple[str, str]]:
    """(path, the view permission that opens it)."""
    return [
        ("/api/v1/manage/announcements/", "view_announcement"),
        (f"/api/v1/manage/announcements/{world['announcement'].pk}/", "view_announcement"),
        ("/api/v1/manage/bulletins/", "view_bulletin"),
        (f"/api/v1/manage/bulletins/{world['bulletin'].pk}/", "view_bulletin"),
        ("/api/v1/manage/messages/", "view_message"),
        (f"/api/v1/manage/messages/{world['message'].pk}/", "view_message"),
        (f"/api/v1/manage/messages/{world['message'].pk}/unread-recipients/", "view_message"),
        (f"/api/v1/manage/bulletins/{world['bulletin'].pk}/unread-recipients/", "view_bulletin"),
        ("/api/v1/manage/user-groups/", "view_usergroup"),
        (f"/api/v1/manage/user-groups/{world['group'].pk}/", "view_usergroup"),
        (f"/api/v1/manage/user-groups/{world['group'].pk}/members/", "view_usergroup"),
        ("/api/v1/manage/message-types/", "view_messagetype"),
        (f"/api/v1/manage/message-types/{world['message_type'].pk}/", "view_messagetype"),
        ("/api/v1/manage/subscriptions/", "view_subscription"),
        (f"/api/v1/manage/subscriptions/{world['subscription'].pk}/", "view_subscription"),
        ("/api/v1/manage/notifications/", "view_notification"),
        (f"/api/v1/manage/notifications/{world['notification'].pk}/", "view_notification"),
        ("/api/v1/manage/audit/", "view_auditentry"),
        ("/api/v1/manage/audit/export/", "view_auditentry"),
    ]


def test_authorisation_matrix(
    world: dict[str, Any], anon_client: Any, recipient_client: Any, operator_client: Any
) -> None:
    staff_without = client_for(StaffFactory(username="stan"))
    # Staff holding every *other* permission (add/change/delete of all, and the
    # other models' view): write permissions never open a read.
    others = StaffFactory(username="wendy")
    for path, codename in _endpoints(world):
        allowed = StaffFactory(username=f"viewer-{codename}-{abs(hash(path)) % 10_000}")
        # The django-notifications-hq drop-in has a "notification" model too: this is ours.
        ours = Permission.objects.exclude(content_type__app_label="notifications")
        allowed.user_permissions.add(ours.get(codename=codename))
        model = codename.removeprefix("view_")
        others.user_permissions.set(
            Permission.objects.filter(codename__endswith=f"_{model}").exclude(codename=codename)
        )
        others = type(others).objects.get(pk=others.pk)  # drop the permission cache
        for client, status in (
            (anon_client, 401),
            (recipient_client, 403),
            (staff_without, 403),
            (client_for(others), 403),
        ):
            response = client.get(path)
            assert_error(response, status)
            assert SECRET not in response.content.decode(), path
        for client in (client_for(allowed), operator_client):
            response = client.get(path)
            assert response.status_code == 200, (path, response.content)


def test_staff_with_the_view_permission_cannot_write(world: dict[str, Any]) -> None:
    viewer = StaffFactory(username="viewer")
    viewer.user_permissions.add(*Permission.objects.filter(codename__startswith="view_"))
    client = client_for(viewer)
    assert client.get("/api/v1/manage/messages/").status_code == 200
    assert_error(client.post("/api/v1/manage/user-groups/", {"name": "x"}, format="json"), 403)
    assert_error(client.delete(f"/api/v1/manage/messages/{world['message'].pk}/"), 403)
    assert_error(client.patch(f"/api/v1/manage/bulletins/{world['bulletin'].pk}/", {"title": "x"}, format="json"), 403)
    assert_error(
        client.post(f"/api/v1/manage/user-groups/{world['group'].pk}/members/", {"user_ids": [1]}, format="json"), 403
    )


def test_malformed_ids_are_refused_before_anything_is_said(anon_client: Any, recipient_client: Any) -> None:
    for resource in ("announcements", "bulletins", "messages", "user-groups", "message-types", "subscriptions"):
        path = f"/api/v1/manage/{resource}/abc/"
        assert_error(anon_client.get(path), 401)
        assert_error(recipient_client.get(path), 403)
