"""Object-level permissions: nobody sees, marks or hides an item that is not
theirs, and operator endpoints need the matching Django model permission.

Every attempt is checked three ways: the documented status with the error
envelope, every row of the project's tables unchanged, and every read-model
key in Redis unchanged.
"""

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from tests.conftest import assert_error, client_for
from tests.security.seed import World, build_world, db_state, item_id, redis_state, staff_with, warm_up

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db: None) -> World:
    return build_world()


# --- the outsider against the recipient's items ------------------------------------------

INBOX_TARGETS: dict[str, Callable[[World], str]] = {
    "message to alice": lambda w: item_id(w.alice_message),
    "message to a group mallory is not in": lambda w: item_id(w.group_message),
    "pulled message to that group": lambda w: item_id(w.pull_message),
    "bulletin for that group": lambda w: item_id(w.alice_bulletin),
    "notification of a scope mallory does not subscribe to": lambda w: item_id(w.alice_notification),
}

INBOX_VERBS = [
    ("get", "/api/v1/inbox/{id}/"),
    ("delete", "/api/v1/inbox/{id}/"),
    ("post", "/api/v1/inbox/{id}/read/"),
    ("post", "/api/v1/inbox/{id}/unread/"),
]


@pytest.mark.parametrize(("method", "template"), INBOX_VERBS)
@pytest.mark.parametrize("target", list(INBOX_TARGETS))
def test_outsider_cannot_touch_an_inbox_item(world: World, redis: Any, target: str, method: str, template: str) -> None:
    ref = INBOX_TARGETS[target](world)
    mallory = client_for(world.mallory)
    warm_up(mallory)
    # Alice has read it: an outsider's "unread" must not flip her state either.
    assert client_for(world.alice).post(f"/api/v1/inbox/{ref}/read/").status_code == 204
    before_db, before_redis = db_state(), redis_state(redis)

    response = getattr(mallory, method)(template.format(id=ref))

    assert_error(response, 404, "not_found")
    assert db_state() == before_db
    assert redis_state(redis) == before_redis
    alice_view = client_for(world.alice).get(f"/api/v1/inbox/{ref}/")
    assert alice_view.status_code == 200
    assert alice_view.json()["read"] is True


@pytest.mark.parametrize(
    ("method", "template"),
    [
        ("get", "/api/v1/announcements/{id}/"),
        ("post", "/api/v1/announcements/{id}/read/"),
        ("post", "/api/v1/announcements/{id}/unread/"),
    ],
)
def test_outsider_cannot_touch_an_announcement_of_another_platform(
    world: World, redis: Any, method: str, template: str
) -> None:
    announcement_id = world.customer_announcement.pk
    mallory = client_for(world.mallory)
    warm_up(mallory)
    assert client_for(world.alice).post(f"/api/v1/announcements/{announcement_id}/read/").status_code == 204
    before_db, before_redis = db_state(), redis_state(redis)

    assert_error(getattr(mallory, method)(template.format(id=announcement_id)), 404, "not_found")

    assert db_state() == before_db
    assert redis_state(redis) == before_redis
    assert client_for(world.alice).get(f"/api/v1/announcements/{announcement_id}/").json()["read"] is True
    ids = [a["id"] for a in mallory.get("/api/v1/announcements/").json()["results"]]
    assert str(announcement_id) not in ids
    assert str(world.public_announcement.pk) in ids


def test_outsider_lists_and_counts_hold_nothing_of_alice(world: World) -> None:
    mallory = client_for(world.mallory)
    listed = {item["id"] for item in mallory.get("/api/v1/inbox/").json()["results"]}
    alice_only = {make(world) for make in INBOX_TARGETS.values()}
    assert listed.isdisjoint(alice_only)
    assert alice_only <= {item["id"] for item in client_for(world.alice).get("/api/v1/inbox/").json()["results"]}
    assert mallory.get("/api/v1/inbox/counts/").json()["unread"] == len(listed)


def test_outsider_read_all_marks_only_their_own(world: World) -> None:
    mallory = client_for(world.mallory)
    assert mallory.post("/api/v1/inbox/read-all/", {}, format="json").status_code == 200
    alice = client_for(world.alice).get("/api/v1/inbox/").json()
    assert alice["unread_count"] == len(alice["results"])
    assert not any(item["read"] for item in alice["results"])


# --- pages -----------------------------------------------------------------------------------

PAGE_ATTEMPTS = [
    ("get", "/inbox/{id}/"),
    ("post", "/inbox/{id}/hide/"),
]


@pytest.mark.parametrize(("method", "template"), PAGE_ATTEMPTS)
@pytest.mark.parametrize("target", list(INBOX_TARGETS))
def test_another_users_item_page_is_404(world: World, redis: Any, target: str, method: str, template: str) -> None:
    ref = INBOX_TARGETS[target](world)
    browser = Client()
    browser.force_login(world.mallory)
    assert browser.get("/inbox/").status_code == 200
    before_db, before_redis = db_state(), redis_state(redis)

    response = getattr(browser, method)(template.format(id=ref))

    assert response.status_code == 404
    assert b"alice" not in response.content.lower()
    assert db_state() == before_db
    assert redis_state(redis) == before_redis
    alice = client_for(world.alice).get(f"/api/v1/inbox/{ref}/")
    assert alice.status_code == 200
    assert alice.json()["read"] is False


def test_announcement_page_of_another_platform_is_404(world: World, redis: Any) -> None:
    browser = Client()
    browser.force_login(world.mallory)
    assert browser.get("/announcements/").status_code == 200
    before_db, before_redis = db_state(), redis_state(redis)
    assert browser.get(f"/announcements/{world.customer_announcement.pk}/").status_code == 404
    assert db_state() == before_db
    assert redis_state(redis) == before_redis


# --- operator endpoints ----------------------------------------------------------------------


def _announcement_body() -> dict[str, Any]:
    return {"title": "New", "body_html": "<p>x</p>", "platforms": ["user"]}


def _bulletin_body(w: World) -> dict[str, Any]:
    return {"title": "B", "body_html": "<p>b</p>", "display_time": "2026-01-01T00:00:00Z", "user_groups": []}


# (method, path, body, the one model permission it needs, success status)
OPERATOR_ENDPOINTS: dict[str, tuple[str, Callable[[World], str], Callable[[World], Any], str, int]] = {
    "set platforms": (
        "put",
        lambda w: f"/api/v1/manage/users/{w.mallory.pk}/platforms/",
        lambda w: {"platforms": ["customer"]},
        "core.change_userplatform",
        200,
    ),
    "create group": (
        "post",
        lambda w: "/api/v1/manage/user-groups/",
        lambda w: {"name": "new-group"},
        "messagecenter.add_usergroup",
        201,
    ),
    "add members": (
        "post",
        lambda w: f"/api/v1/manage/user-groups/{w.alice_group.pk}/members/",
        lambda w: {"user_ids": [w.mallory.pk]},
        "messagecenter.change_usergroup",
        200,
    ),
    "remove members": (
        "delete",
        lambda w: f"/api/v1/manage/user-groups/{w.alice_group.pk}/members/",
        lambda w: {"user_ids": [w.alice.pk]},
        "messagecenter.change_usergroup",
        200,
    ),
    "create announcement": (
        "post",
        lambda w: "/api/v1/manage/announcements/",
        lambda w: _announcement_body(),
        "notices.add_announcement",
        201,
    ),
    "change announcement": (
        "patch",
        lambda w: f"/api/v1/manage/announcements/{w.customer_announcement.pk}/",
        lambda w: {"title": "Changed", "platforms": ["user"]},
        "notices.change_announcement",
        200,
    ),
    "delete announcement": (
        "delete",
        lambda w: f"/api/v1/manage/announcements/{w.customer_announcement.pk}/",
        lambda w: None,
        "notices.delete_announcement",
        204,
    ),
    "announcement stats": (
        "get",
        lambda w: f"/api/v1/manage/announcements/{w.customer_announcement.pk}/stats/",
        lambda w: None,
        "notices.view_announcement",
        200,
    ),
    "create bulletin": (
        "post",
        lambda w: "/api/v1/manage/bulletins/",
        _bulletin_body,
        "messagecenter.add_bulletin",
        201,
    ),
    "change bulletin": (
        "patch",
        lambda w: f"/api/v1/manage/bulletins/{w.alice_bulletin.pk}/",
        lambda w: {"title": "Changed", "user_groups": []},
        "messagecenter.change_bulletin",
        200,
    ),
    "delete bulletin": (
        "delete",
        lambda w: f"/api/v1/manage/bulletins/{w.alice_bulletin.pk}/",
        lambda w: None,
        "messagecenter.delete_bulletin",
        204,
    ),
    "send message": (
        "post",
        lambda w: "/api/v1/manage/messages/",
        lambda w: {"category": "system", "title": "T", "body_html": "<p>t</p>", "to": {"users": [w.mallory.pk]}},
        "messagecenter.add_message",
        202,
    ),
    "retract message": (
        "delete",
        lambda w: f"/api/v1/manage/messages/{w.alice_message.pk}/",
        lambda w: None,
        "messagecenter.delete_message",
        204,
    ),
    "create message type": (
        "post",
        lambda w: "/api/v1/manage/message-types/",
        lambda w: {"code": "invoice", "name": "Invoices"},
        "messagecenter.add_messagetype",
        201,
    ),
    "subscribe": (
        "post",
        lambda w: "/api/v1/manage/subscriptions/",
        lambda w: {"message_type": "shipment", "scope": "warehouse-1", "user": w.mallory.pk},
        "messagecenter.add_subscription",
        201,
    ),
    "unsubscribe": (
        "delete",
        lambda w: f"/api/v1/manage/subscriptions/{w.alice_subscription.pk}/",
        lambda w: None,
        "messagecenter.delete_subscription",
        204,
    ),
    "send notification": (
        "post",
        lambda w: "/api/v1/manage/notifications/",
        lambda w: {"message_type": "shipment", "scope": "warehouse-1", "title": "N", "body_html": "<p>n</p>"},
        "messagecenter.add_notification",
        202,
    ),
}


def _call(client: Any, method: str, path: str, body: Any) -> Any:
    if body is None:
        return getattr(client, method)(path)
    return getattr(client, method)(path, body, format="json")


def _staff_with_everything_but(perm: str) -> Any:
    app_label, codename = perm.split(".")
    others = Permission.objects.exclude(content_type__app_label=app_label, codename=codename)
    staff = staff_with(username="stan-almost")
    staff.user_permissions.set(others)
    return staff


@pytest.mark.parametrize("endpoint", list(OPERATOR_ENDPOINTS))
def test_operator_endpoint_needs_its_model_permission(world: World, redis: Any, endpoint: str) -> None:
    method, path_of, body_of, perm, success = OPERATOR_ENDPOINTS[endpoint]
    path, body = path_of(world), body_of(world)
    app_label, codename = perm.split(".")
    assert Permission.objects.filter(content_type__app_label=app_label, codename=codename).exists(), perm
    plain = world.mallory
    clients = {
        "plain user": client_for(plain),
        "staff without permissions": client_for(staff_with(username="stan-bare")),
        "staff with every other permission": client_for(_staff_with_everything_but(perm)),
    }
    exact = client_for(staff_with(perm, username="stan-exact"))
    before_db, before_redis = db_state(), redis_state(redis)

    for who, client in clients.items():
        response = _call(client, method, path, body)
        assert response.status_code == 403, who
        assert_error(response, 403, "permission_denied")
    assert_error(_call(Client(), method, path, body), 401, "not_authenticated")
    # A plain user holding the permission is still no operator: staff status is needed too.
    plain.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    assert_error(_call(client_for(plain), method, path, body), 403, "permission_denied")
    plain.user_permissions.clear()

    assert db_state() == before_db
    assert redis_state(redis) == before_redis

    response = _call(exact, method, path, body)
    assert response.status_code == success, response.content


# --- admin actions ----------------------------------------------------------------------------

# (changelist, action, the model's view permission, the permission the action needs, the object)
ADMIN_ACTIONS: dict[str, tuple[str, str, str, str, Callable[[World], Any]]] = {
    "retract messages": (
        "/admin/messagecenter/message/",
        "retract",
        "messagecenter.view_message",
        "messagecenter.delete_message",
        lambda w: w.alice_message,
    ),
    "withdraw notifications": (
        "/admin/messagecenter/notification/",
        "withdraw",
        "messagecenter.view_notification",
        "messagecenter.change_notification",
        lambda w: w.alice_notification,
    ),
    "unpublish announcements": (
        "/admin/notices/announcement/",
        "unpublish",
        "notices.view_announcement",
        "notices.change_announcement",
        lambda w: w.customer_announcement,
    ),
}


@pytest.mark.parametrize("action", list(ADMIN_ACTIONS))
def test_admin_actions_need_their_permission(world: World, redis: Any, action: str) -> None:
    changelist, name, view_perm, needed, target_of = ADMIN_ACTIONS[action]
    target = target_of(world)
    viewer = Client()
    viewer.force_login(staff_with(view_perm, username="vera-viewer"))
    allowed = Client()
    allowed.force_login(staff_with(view_perm, needed, username="cal-changer"))
    warm_up(client_for(world.alice))
    before_db, before_redis = db_state(), redis_state(redis)

    page = viewer.get(changelist)
    assert page.status_code == 200
    assert f'value="{name}"' not in page.content.decode()  # not offered
    viewer.post(changelist, {"action": name, "_selected_action": [target.pk]})
    assert db_state() == before_db
    assert redis_state(redis) == before_redis

    assert f'value="{name}"' in allowed.get(changelist).content.decode()
    response = allowed.post(changelist, {"action": name, "_selected_action": [target.pk]})
    assert response.status_code == 302
    assert db_state() != before_db
