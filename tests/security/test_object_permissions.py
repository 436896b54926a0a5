"""Object-level permissions: nobody sees, marks or hides an item that is not
theirs, and operator endpoints need the matching Django model permission.

Every attempt is checked three ways: the documented status with the error
envelope, every row of the project's tables unchanged, and every read-model
key in Redis unchanged.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import get_resolver

from accounts.models import UserPlatform
from audit.models import AuditEntry
from core.urls import MalformedIdApi
from messagecenter.models import (
    Bulletin,
    Message,
    MessageType,
    Notification,
    Subscription,
    UserGroup,
    UserGroupMembership,
)
from notices.models import Announcement
from tests.conftest import assert_error, client_for
from tests.factories import SuperuserFactory
from tests.security.seed import (
    LOOPBACK_HOOK,
    World,
    build_world,
    db_state,
    item_id,
    redis_state,
    staff_with,
    warm_up,
)
from webhooks.models import WebhookEndpoint

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def world(db: None, settings: Any) -> World:
    # Webhook URLs here are on loopback (a closed port): allowed for these tests only.
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
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


def _assert(condition: bool, what: Any = None) -> None:
    assert condition, what


def _in_inbox(user: Any, ref: str) -> bool:
    return client_for(user).get(f"/api/v1/inbox/{ref}/").status_code == 200


def _later(days: int) -> str:
    return (datetime.now(UTC) + timedelta(days=days)).isoformat()


@dataclass(frozen=True)
class Op:
    """One operator endpoint: its call, the model permissions it needs (all of
    them), the status it answers when permitted, and what it must have done
    then, checked in PostgreSQL and through the read model."""

    method: str
    path: Callable[[World], str]
    body: Callable[[World], Any]
    perms: tuple[str, ...]
    status: int
    effect: Callable[[World, Any], None]


OPERATOR_ENDPOINTS: dict[str, Op] = {
    "set platforms": Op(
        "put",
        lambda w: f"/api/v1/manage/users/{w.mallory.pk}/platforms/",
        lambda w: {"platforms": ["customer"]},
        ("accounts.change_userplatform",),
        200,
        lambda w, r: _assert(
            set(UserPlatform.objects.filter(user=w.mallory).values_list("platform", flat=True)) == {"customer"}
        ),
    ),
    "create group": Op(
        "post",
        lambda w: "/api/v1/manage/user-groups/",
        lambda w: {"name": "new-group"},
        ("messagecenter.add_usergroup",),
        201,
        lambda w, r: _assert(UserGroup.objects.get(pk=r.json()["id"]).name == "new-group"),
    ),
    "add members": Op(
        "post",
        lambda w: f"/api/v1/manage/user-groups/{w.alice_group.pk}/members/",
        lambda w: {"user_ids": [w.mallory.pk]},
        ("messagecenter.change_usergroup",),
        200,
        lambda w, r: _assert(
            r.json() == {"added": 1}
            and UserGroupMembership.objects.filter(group=w.alice_group, user=w.mallory).exists()
            and _in_inbox(w.mallory, item_id(w.alice_bulletin))  # the group's bulletin reaches the new member
        ),
    ),
    "remove members": Op(
        "delete",
        lambda w: f"/api/v1/manage/user-groups/{w.alice_group.pk}/members/",
        lambda w: {"user_ids": [w.alice.pk]},
        ("messagecenter.change_usergroup",),
        200,
        lambda w, r: _assert(
            r.json() == {"removed": 1}
            and not UserGroupMembership.objects.filter(group=w.alice_group, user=w.alice).exists()
        ),
    ),
    "create announcement": Op(
        "post",
        lambda w: "/api/v1/manage/announcements/",
        lambda w: {"title": "New", "body_html": "<p>x</p>", "platforms": ["user"]},
        ("notices.add_announcement",),
        201,
        lambda w, r: _assert(
            r.json()["id"] in [a["id"] for a in client_for(w.mallory).get("/api/v1/announcements/").json()["results"]]
        ),
    ),
    "change announcement": Op(
        "patch",
        lambda w: f"/api/v1/manage/announcements/{w.customer_announcement.pk}/",
        lambda w: {"title": "Changed", "platforms": ["user"]},
        ("notices.change_announcement",),
        200,
        lambda w, r: _assert(
            Announcement.objects.get(pk=w.customer_announcement.pk).title == "Changed"
            # Now on the user platform: mallory sees it.
            and client_for(w.mallory).get(f"/api/v1/announcements/{w.customer_announcement.pk}/").status_code == 200
        ),
    ),
    "delete announcement": Op(
        "delete",
        lambda w: f"/api/v1/manage/announcements/{w.customer_announcement.pk}/",
        lambda w: None,
        ("notices.delete_announcement",),
        204,
        lambda w, r: _assert(
            client_for(w.alice).get(f"/api/v1/announcements/{w.customer_announcement.pk}/").status_code == 404
        ),
    ),
    "announcement stats": Op(
        "get",
        lambda w: f"/api/v1/manage/announcements/{w.customer_announcement.pk}/stats/",
        lambda w: None,
        ("notices.view_announcement",),
        200,
        lambda w, r: _assert(r.json()["read_total"] == 0),
    ),
    "create bulletin": Op(
        "post",
        lambda w: "/api/v1/manage/bulletins/",
        lambda w: {"title": "B", "body_html": "<p>b</p>", "display_time": "2026-01-01T00:00:00Z", "user_groups": []},
        ("messagecenter.add_bulletin",),
        201,
        lambda w, r: _assert(_in_inbox(w.mallory, f"b{r.json()['id']}")),  # no groups: everyone
    ),
    "change bulletin": Op(
        "patch",
        lambda w: f"/api/v1/manage/bulletins/{w.alice_bulletin.pk}/",
        lambda w: {"title": "Changed", "user_groups": []},
        ("messagecenter.change_bulletin",),
        200,
        lambda w, r: _assert(
            Bulletin.objects.get(pk=w.alice_bulletin.pk).title == "Changed"
            and _in_inbox(w.mallory, item_id(w.alice_bulletin))
        ),
    ),
    "delete bulletin": Op(
        "delete",
        lambda w: f"/api/v1/manage/bulletins/{w.alice_bulletin.pk}/",
        lambda w: None,
        ("messagecenter.delete_bulletin",),
        204,
        lambda w, r: _assert(not _in_inbox(w.alice, item_id(w.alice_bulletin))),
    ),
    "send message": Op(
        "post",
        lambda w: "/api/v1/manage/messages/",
        lambda w: {"category": "system", "title": "T", "body_html": "<p>t</p>", "to": {"users": [w.mallory.pk]}},
        ("messagecenter.add_message",),
        202,
        lambda w, r: _assert(r.json()["recipients"] == 1 and _in_inbox(w.mallory, f"m{r.json()['id']}")),
    ),
    "edit scheduled message": Op(
        "patch",
        lambda w: f"/api/v1/manage/messages/{w.scheduled_message.pk}/",
        lambda w: {"title": "Moved", "to": {"users": [str(w.mallory.pk)]}, "send_at": _later(2)},
        ("messagecenter.change_message",),
        200,
        lambda w, r: _assert(
            (r.json()["status"], r.json()["recipients"]) == ("scheduled", 1)
            and Message.objects.get(pk=w.scheduled_message.pk).title == "Moved"
            # Both rows are scheduled messages: send_at is set.
            and Message.objects.get(pk=w.scheduled_message.pk).send_at > w.scheduled_message.send_at  # type: ignore[operator]
        ),
    ),
    "retract message": Op(
        "delete",
        lambda w: f"/api/v1/manage/messages/{w.alice_message.pk}/",
        lambda w: None,
        ("messagecenter.delete_message",),
        204,
        lambda w, r: _assert(not _in_inbox(w.alice, item_id(w.alice_message))),
    ),
    # A reminder sends a message about one the operator may read.
    "remind of a message": Op(
        "post",
        lambda w: f"/api/v1/manage/messages/{w.alice_message.pk}/remind/",
        lambda w: {"title": "Please read"},
        ("messagecenter.add_message", "messagecenter.view_message"),
        202,
        lambda w, r: _assert(
            r.json()["recipients"] == 1
            and Message.objects.get(pk=r.json()["id"]).title == "Please read"
            and _in_inbox(w.alice, f"m{r.json()['id']}")
        ),
    ),
    "remind of a bulletin": Op(
        "post",
        lambda w: f"/api/v1/manage/bulletins/{w.alice_bulletin.pk}/remind/",
        lambda w: {},
        ("messagecenter.add_message", "messagecenter.view_bulletin"),
        202,
        lambda w, r: _assert(
            r.json()["recipients"] == 1
            and Message.objects.get(pk=r.json()["id"]).title == "Reminder: Group bulletin"
            and _in_inbox(w.alice, f"m{r.json()['id']}")
        ),
    ),
    "create message type": Op(
        "post",
        lambda w: "/api/v1/manage/message-types/",
        lambda w: {"code": "invoice", "name": "Invoices", "self_service": True},
        ("messagecenter.add_messagetype",),
        201,
        lambda w, r: _assert(MessageType.objects.get(code="invoice").self_service),
    ),
    "subscribe": Op(
        "post",
        lambda w: "/api/v1/manage/subscriptions/",
        lambda w: {"message_type": "shipment", "scope": "warehouse-1", "user": w.mallory.pk},
        ("messagecenter.add_subscription",),
        201,
        lambda w, r: _assert(Subscription.objects.get(pk=r.json()["id"]).user_id == w.mallory.pk),
    ),
    "unsubscribe": Op(
        "delete",
        lambda w: f"/api/v1/manage/subscriptions/{w.alice_subscription.pk}/",
        lambda w: None,
        ("messagecenter.delete_subscription",),
        204,
        lambda w, r: _assert(not Subscription.objects.filter(pk=w.alice_subscription.pk).exists()),
    ),
    "send notification": Op(
        "post",
        lambda w: "/api/v1/manage/notifications/",
        lambda w: {"message_type": "shipment", "scope": "warehouse-1", "title": "N", "body_html": "<p>n</p>"},
        ("messagecenter.add_notification",),
        202,
        lambda w, r: _assert(r.json()["recipients"] == 1 and _in_inbox(w.alice, f"n{r.json()['id']}")),
    ),
    "edit scheduled notification": Op(
        "patch",
        lambda w: f"/api/v1/manage/notifications/{w.scheduled_notification.pk}/",
        lambda w: {"title": "Moved", "scope": "warehouse-2", "send_at": _later(2)},
        ("messagecenter.change_notification",),
        200,
        lambda w, r: _assert(
            r.json()["status"] == "scheduled"
            and Notification.objects.filter(pk=w.scheduled_notification.pk, title="Moved", scope="warehouse-2").exists()
        ),
    ),
    "cancel scheduled notification": Op(
        "delete",
        lambda w: f"/api/v1/manage/notifications/{w.scheduled_notification.pk}/",
        lambda w: None,
        ("messagecenter.delete_notification",),
        204,
        lambda w, r: _assert(
            Notification.objects.filter(pk=w.scheduled_notification.pk, scheduled=False, withdrawn=True).exists()
        ),
    ),
    "withdraw notification": Op(
        "delete",
        lambda w: f"/api/v1/manage/notifications/{w.alice_notification.pk}/",
        lambda w: None,
        ("messagecenter.delete_notification",),
        204,
        lambda w, r: _assert(not _in_inbox(w.alice, item_id(w.alice_notification))),
    ),
    "register webhook": Op(
        "post",
        lambda w: "/api/v1/manage/webhooks/",
        lambda w: {"url": LOOPBACK_HOOK + "/2", "events": ["delivery.failed"], "description": "on-call"},
        ("webhooks.add_webhookendpoint",),
        201,
        lambda w, r: _assert(
            r.json()["secret"].startswith("whsec_")
            and WebhookEndpoint.objects.get(pk=r.json()["id"]).url == LOOPBACK_HOOK + "/2"
        ),
    ),
    "change webhook": Op(
        "patch",
        lambda w: f"/api/v1/manage/webhooks/{w.webhook.pk}/",
        lambda w: {"events": ["delivery.failed", "message.read"], "active": False},
        ("webhooks.change_webhookendpoint",),
        200,
        lambda w, r: _assert(
            WebhookEndpoint.objects.filter(
                pk=w.webhook.pk, events=["delivery.failed", "message.read"], active=False
            ).exists()
        ),
    ),
    "delete webhook": Op(
        "delete",
        lambda w: f"/api/v1/manage/webhooks/{w.webhook.pk}/",
        lambda w: None,
        ("webhooks.delete_webhookendpoint",),
        204,
        lambda w, r: _assert(not WebhookEndpoint.objects.filter(pk=w.webhook.pk).exists()),
    ),
}


def _write_routes() -> set[tuple[str, str]]:
    """(method, route) of every write under /api/v1/manage/, from the URL
    configuration itself: a new endpoint cannot stay out of the matrix unseen."""
    routes = set()
    for pattern in get_resolver().url_patterns:
        if str(pattern.pattern) != "api/v1/":
            continue
        # The api/v1/ pattern is an include(): a URLResolver, with patterns of its own.
        for inner in pattern.url_patterns:  # type: ignore[union-attr]
            route = str(inner.pattern)
            view = getattr(inner.callback, "view_class", None)
            if not route.startswith("manage/") or view is None or view is MalformedIdApi:
                continue
            for method in ("post", "put", "patch", "delete"):
                if hasattr(view, method):
                    routes.add((method, route))
    return routes


def _route_of(path: str) -> str:
    return re.sub(r"/\d+/", "/<id>/", path.removeprefix("/api/v1/"))


def test_every_operator_write_is_in_the_matrix(world: World) -> None:
    routes = {(m, re.sub(r"<id:\w+>", "<id>", r)) for m, r in _write_routes()}
    covered = {(op.method, _route_of(op.path(world))) for op in OPERATOR_ENDPOINTS.values()}
    assert routes - covered == set()


def _call(client: Any, method: str, path: str, body: Any) -> Any:
    if body is None:
        return getattr(client, method)(path)
    return getattr(client, method)(path, body, format="json")


def _permission(perm: str) -> Permission:
    app_label, codename = perm.split(".")
    return Permission.objects.get(content_type__app_label=app_label, codename=codename)


def _staff_with_everything_but(perm: str, username: str) -> Any:
    app_label, codename = perm.split(".")
    others = Permission.objects.exclude(content_type__app_label=app_label, codename=codename)
    staff = staff_with(username=username)
    staff.user_permissions.set(others)
    return staff


def _permitted(world: World, user: Any, op: Op) -> None:
    """The call succeeds for this user and does what it says, audited as theirs."""
    audited_before = AuditEntry.objects.filter(actor=user).count()
    response = _call(client_for(user), op.method, op.path(world), op.body(world))
    assert response.status_code == op.status, response.content
    op.effect(world, response)
    if op.method != "get":
        assert AuditEntry.objects.filter(actor=user).count() > audited_before


@pytest.mark.parametrize("endpoint", list(OPERATOR_ENDPOINTS))
def test_operator_endpoint_needs_its_model_permission(world: World, redis: Any, endpoint: str) -> None:
    op = OPERATOR_ENDPOINTS[endpoint]
    path, body = op.path(world), op.body(world)
    perms = [_permission(perm) for perm in op.perms]  # each one exists
    plain = world.mallory
    clients = {
        "plain user": client_for(plain),
        "staff without permissions": client_for(staff_with(username="stan-bare")),
    }
    # Staff holding every permission but one of those needed.
    for number, perm in enumerate(op.perms):
        clients[f"staff with every permission but {perm}"] = client_for(
            _staff_with_everything_but(perm, f"stan-almost-{number}")
        )
    exact = staff_with(*op.perms, username="stan-exact")
    before_db, before_redis = db_state(), redis_state(redis)

    for who, client in clients.items():
        response = _call(client, op.method, path, body)
        assert response.status_code == 403, who
        assert_error(response, 403, "permission_denied")
    assert_error(_call(Client(), op.method, path, body), 401, "not_authenticated")
    # A plain user holding the permissions is still no operator: staff status is needed too.
    plain.user_permissions.add(*perms)
    assert_error(_call(clients["plain user"], op.method, path, body), 403, "permission_denied")
    plain.user_permissions.clear()

    assert db_state() == before_db
    assert redis_state(redis) == before_redis

    _permitted(world, exact, op)  # its new token is issued after the snapshots


@pytest.mark.parametrize("endpoint", list(OPERATOR_ENDPOINTS))
def test_a_superuser_may_call_every_operator_endpoint(world: World, endpoint: str) -> None:
    # No model permission of its own: a superuser holds them all.
    _permitted(world, SuperuserFactory(username="sue-super"), OPERATOR_ENDPOINTS[endpoint])


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
