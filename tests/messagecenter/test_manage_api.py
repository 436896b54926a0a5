"""Operators' endpoints: groups, members, bulletins, messages; permissions; schema."""

from typing import Any

import pytest
from django.contrib.auth.models import Permission

from messagecenter import keys as mc_keys
from messagecenter.models import Bulletin, Message, MessageStatus, UserGroup, UserGroupMembership
from tests.conftest import assert_error, client_for
from tests.factories import StaffFactory
from tests.messagecenter.conftest import ids

pytestmark = pytest.mark.django_db(transaction=True)


def test_group_create_and_duplicate(operator_client: Any) -> None:
    response = operator_client.post("/api/v1/manage/user-groups/", {"name": "vip"}, format="json")
    assert response.status_code == 201
    body = response.json()
    assert body["name"] == "vip"
    assert body["member_count"] == 0
    assert isinstance(body["id"], str)
    assert_error(operator_client.post("/api/v1/manage/user-groups/", {"name": "vip"}, format="json"), 400)
    assert_error(operator_client.post("/api/v1/manage/user-groups/", {}, format="json"), 400)


def test_members_add_remove_and_unknown_ids(
    operator_client: Any, recipient: Any, other_recipient: Any, redis: Any
) -> None:

    group = UserGroup.objects.create(name="staff-news")
    url = f"/api/v1/manage/user-groups/{group.pk}/members/"
    response = operator_client.post(url, {"user_ids": [recipient.pk, other_recipient.pk]}, format="json")
    assert response.json() == {"added": 2}
    assert operator_client.post(url, {"user_ids": [recipient.pk]}, format="json").json() == {"added": 0}
    assert redis.smembers(mc_keys.user_groups(recipient.pk)) == {str(group.pk).encode()}
    error = assert_error(operator_client.post(url, {"user_ids": [recipient.pk, 987654]}, format="json"), 400)
    assert "987654" in error["message"]
    error = assert_error(operator_client.delete(url, {"user_ids": [other_recipient.pk, 987655]}, format="json"), 400)
    assert "987655" in str(error)
    assert UserGroupMembership.objects.filter(group=group).count() == 2  # nothing changed
    response = operator_client.delete(url, {"user_ids": [other_recipient.pk]}, format="json")
    assert response.json() == {"removed": 1}
    assert redis.smembers(mc_keys.user_groups(other_recipient.pk)) == set()
    assert_error(operator_client.post(url, {"user_ids": "x"}, format="json"), 400)
    assert_error(
        operator_client.post("/api/v1/manage/user-groups/999999/members/", {"user_ids": [1]}, format="json"), 404
    )


def test_permissions(anon_client: Any, recipient_client: Any, recipient: Any) -> None:
    paths = [
        ("post", "/api/v1/manage/user-groups/"),
        ("post", "/api/v1/manage/user-groups/1/members/"),
        ("post", "/api/v1/manage/bulletins/"),
        ("patch", "/api/v1/manage/bulletins/1/"),
        ("delete", "/api/v1/manage/bulletins/1/"),
        ("post", "/api/v1/manage/messages/"),
        ("delete", "/api/v1/manage/messages/1/"),
    ]
    staff_without_perms = client_for(StaffFactory(username="stan"))
    for method, path in paths:
        assert_error(getattr(anon_client, method)(path, {}, format="json"), 401)
        assert_error(getattr(recipient_client, method)(path, {}, format="json"), 403)
        assert_error(getattr(staff_without_perms, method)(path, {}, format="json"), 403)


def test_staff_with_the_model_permission_may_send(recipient: Any, clock: Any) -> None:
    staff = StaffFactory(username="sender")
    staff.user_permissions.add(Permission.objects.get(codename="add_message"))
    response = client_for(staff).post(
        "/api/v1/manage/messages/",
        {"category": "system", "title": "T", "body_html": "b", "to": {"users": [recipient.pk]}},
        format="json",
    )
    assert response.status_code == 202, response.content


def test_bulletin_create_patch_delete(operator_client: Any, recipient: Any, clock: Any) -> None:
    payload = {"title": "Maintenance", "body_html": "<p>Tonight</p>", "display_time": clock.now.isoformat()}
    response = operator_client.post("/api/v1/manage/bulletins/", payload, format="json")
    assert response.status_code == 201, response.content
    bulletin_id = response.json()["id"]
    client = client_for(recipient)
    items = client.get("/api/v1/inbox/").json()["results"]
    assert [(i["id"], i["kind"], i["category"]) for i in items] == [(f"b{bulletin_id}", "bulletin", "system")]
    response = operator_client.patch(f"/api/v1/manage/bulletins/{bulletin_id}/", {"title": "Moved"}, format="json")
    assert response.status_code == 200
    assert response.json()["title"] == "Moved"
    assert client.get("/api/v1/inbox/").json()["results"][0]["title"] == "Moved"
    assert operator_client.delete(f"/api/v1/manage/bulletins/{bulletin_id}/").status_code == 204
    assert client.get("/api/v1/inbox/").json()["results"] == []
    assert not Bulletin.objects.exists()
    assert_error(operator_client.delete(f"/api/v1/manage/bulletins/{bulletin_id}/"), 404)


@pytest.mark.parametrize(
    "payload",
    [
        {"title": "x", "body_html": "b"},
        {"title": "x", "body_html": "b", "display_time": "soon"},
        {"title": "x", "body_html": "b", "display_time": "2026-11-22T10:00:00Z", "user_groups": [999999]},
        {"title": "x", "body_html": "b", "display_time": "2026-11-22T10:00:00Z", "expire_at": "2026-11-21T10:00:00Z"},
    ],
)
def test_bulletin_bad_input(operator_client: Any, payload: dict[str, Any]) -> None:
    assert_error(operator_client.post("/api/v1/manage/bulletins/", payload, format="json"), 400)


def test_message_send_and_retract(operator_client: Any, recipient: Any, clock: Any) -> None:
    payload = {"category": "transaction", "title": "Paid", "body_html": "<b>ok</b>", "to": {"users": [recipient.pk]}}
    response = operator_client.post("/api/v1/manage/messages/", payload, format="json")
    assert response.status_code == 202
    body = response.json()
    assert body["delivery"] == "push"
    assert body["recipients"] == 1
    client = client_for(recipient)
    assert ids(client.get("/api/v1/inbox/")) == [f"m{body['id']}"]
    assert operator_client.delete(f"/api/v1/manage/messages/{body['id']}/").status_code == 204
    assert Message.objects.get(pk=body["id"]).status == MessageStatus.RETRACTED
    assert client.get("/api/v1/inbox/").json()["results"] == []
    assert operator_client.delete(f"/api/v1/manage/messages/{body['id']}/").status_code == 204
    assert_error(operator_client.delete("/api/v1/manage/messages/999999/"), 404)


@pytest.mark.parametrize(
    "payload",
    [
        {"category": "spam", "title": "t", "body_html": "b", "to": {"everyone": True}},
        {"category": "system", "title": "t", "body_html": "b", "to": {}},
        {"category": "system", "title": "t", "body_html": "b", "to": {"users": [987654]}},
        {"category": "system", "title": "t", "body_html": "b", "to": {"groups": [987654]}},
        {"category": "system", "title": "t", "body_html": "b", "to": "everyone"},
        {"category": "system", "title": "t", "body_html": "b", "to": {"everyone": True}, "images": ["nope"]},
        {
            "category": "system",
            "title": "t",
            "body_html": "b",
            "to": {"everyone": True},
            "expire_at": "2020-01-01T00:00:00Z",
        },
        {"category": "system", "body_html": "b", "to": {"everyone": True}},
    ],
)
def test_message_bad_input(operator_client: Any, payload: dict[str, Any], clock: Any) -> None:
    assert_error(operator_client.post("/api/v1/manage/messages/", payload, format="json"), 400)
    assert not Message.objects.exists()


def test_schema_documents_every_path(anon_client: Any) -> None:
    schema = anon_client.get("/api/schema/?format=json").json()
    paths = schema["paths"]
    for path, methods in {
        "/api/v1/inbox/": {"get"},
        "/api/v1/inbox/{item_id}/": {"get", "delete"},
        "/api/v1/inbox/{item_id}/read/": {"post"},
        "/api/v1/inbox/{item_id}/unread/": {"post"},
        "/api/v1/inbox/read-all/": {"post"},
        "/api/v1/inbox/seen/": {"post"},
        "/api/v1/inbox/counts/": {"get"},
        "/api/v1/manage/user-groups/": {"post"},
        "/api/v1/manage/user-groups/{group_id}/members/": {"post", "delete"},
        "/api/v1/manage/bulletins/": {"post"},
        "/api/v1/manage/bulletins/{bulletin_id}/": {"patch", "delete"},
        "/api/v1/manage/messages/": {"post"},
        "/api/v1/manage/messages/{message_id}/": {"delete"},
    }.items():
        assert methods <= set(paths[path]), path
    assert {"400", "401"} <= set(paths["/api/v1/inbox/"]["get"]["responses"])
    assert {"401", "403", "404"} <= set(paths["/api/v1/manage/messages/{message_id}/"]["delete"]["responses"])
    item = schema["components"]["schemas"]["InboxItemApiOutput"]["properties"]
    assert {"id", "kind", "category", "title", "summary", "created_at", "read", "body_html", "images", "link"} <= set(
        item
    )


def test_text_fields_refuse_non_strings(operator_client: Any, recipient: Any, clock: Any) -> None:
    payload = {"category": "system", "title": 123, "body_html": "b", "to": {"users": [recipient.pk]}}
    assert_error(operator_client.post("/api/v1/manage/messages/", payload, format="json"), 400)
    assert_error(operator_client.post("/api/v1/manage/user-groups/", {"name": True}, format="json"), 400)
