"""``/api/v1/manage/`` message types, subscriptions and notifications over REST,
and notifications in the inbox endpoints: statuses, envelopes, permissions,
nothing changed on error, privacy."""

from typing import Any

import pytest
from django.contrib.auth.models import Permission

from messagecenter.models import MessageType, Notification, Subscription
from tests.conftest import assert_error, client_for
from tests.factories import StaffFactory
from tests.messagecenter.conftest import ids, make_group

pytestmark = pytest.mark.django_db(transaction=True)

TYPES = "/api/v1/manage/message-types/"
SUBS = "/api/v1/manage/subscriptions/"
NOTIFY = "/api/v1/manage/notifications/"


@pytest.fixture
def replenish(operator_client: Any) -> dict[str, Any]:
    response = operator_client.post(TYPES, {"code": "replenish", "name": "Replenish"}, format="json")
    assert response.status_code == 201, response.content
    return dict(response.json())


def test_message_type_create(operator_client: Any) -> None:
    response = operator_client.post(TYPES, {"code": "order", "name": "Order", "category": "transaction"}, format="json")
    assert response.status_code == 201
    body = response.json()
    assert isinstance(body["id"], str)
    assert (body["code"], body["category"]) == ("order", "transaction")
    assert_error(operator_client.post(TYPES, {"code": "order", "name": "Again"}, format="json"), 400, "duplicate")
    assert_error(operator_client.post(TYPES, {"code": "x", "name": "X", "category": "nope"}, format="json"), 400)
    assert_error(operator_client.post(TYPES, {"code": "bad code!", "name": "X"}, format="json"), 400)
    assert MessageType.objects.count() == 1


def test_subscribe_send_read_in_inbox(
    operator_client: Any, replenish: dict[str, Any], recipient: Any, other_recipient: Any, outsider: Any, clock: Any
) -> None:
    group = make_group("pickers", recipient, other_recipient)
    r1 = operator_client.post(SUBS, {"message_type": "replenish", "scope": "WH1", "user": recipient.pk}, format="json")
    assert r1.status_code == 201, r1.content
    body = r1.json()
    assert isinstance(body["id"], str)
    assert (body["user"], body["group"], body["scope"]) == (str(recipient.pk), None, "WH1")
    assert body["created_at"].endswith("+00:00")
    r2 = operator_client.post(SUBS, {"message_type": "replenish", "scope": "WH1", "group": group.pk}, format="json")
    assert r2.status_code == 201
    response = operator_client.post(
        NOTIFY,
        {
            "message_type": "replenish",
            "scope": "WH1",
            "title": "Replenish A-01",
            "body_html": "<p>Go<script>x</script></p>",
        },
        format="json",
    )
    assert response.status_code == 202, response.content
    out = response.json()
    assert isinstance(out["id"], str)
    assert out["recipients"] == 2  # alice directly and through the group: once
    item_id = f"n{out['id']}"

    alice = client_for(recipient)
    listing = alice.get("/api/v1/inbox/").json()
    assert [(i["id"], i["kind"], i["category"], i["read"]) for i in listing["results"]] == [
        (item_id, "notification", "system", False)
    ]
    assert listing["unread_count"] == 1
    detail = alice.get(f"/api/v1/inbox/{item_id}/").json()
    assert detail["body_html"] == "<p>Go</p>"
    assert (detail["link"], detail["images"], detail["title"]) == (None, [], "Replenish A-01")
    assert detail["created_at"].endswith("+00:00")
    assert alice.post(f"/api/v1/inbox/{item_id}/read/").status_code == 204
    assert alice.get("/api/v1/inbox/counts/").json()["unread"] == 0
    assert alice.post(f"/api/v1/inbox/{item_id}/unread/").status_code == 204
    assert alice.get("/api/v1/inbox/counts/").json()["by_category"]["system"] == 1
    assert alice.delete(f"/api/v1/inbox/{item_id}/").status_code == 204
    assert alice.get("/api/v1/inbox/").json()["results"] == []
    assert ids(client_for(other_recipient).get("/api/v1/inbox/")) == [item_id]  # only alice's copy hidden

    # Privacy: never addressed to the outsider.
    mallory = client_for(outsider)
    assert_error(mallory.get(f"/api/v1/inbox/{item_id}/"), 404)
    assert_error(mallory.post(f"/api/v1/inbox/{item_id}/read/"), 404)
    assert mallory.get("/api/v1/inbox/").json()["results"] == []


def test_polling_and_expiry_through_the_api(
    operator_client: Any, replenish: dict[str, Any], recipient: Any, clock: Any
) -> None:
    operator_client.post(SUBS, {"message_type": "replenish", "scope": "WH1", "user": recipient.pk}, format="json")
    first = operator_client.post(
        NOTIFY, {"message_type": "replenish", "scope": "WH1", "title": "a", "body_html": "", "ttl_seconds": 30},
        format="json",
    ).json()  # fmt: skip
    since = clock.now.isoformat()
    clock.advance(seconds=10)
    second = operator_client.post(
        NOTIFY, {"message_type": "replenish", "scope": "WH1", "title": "b", "body_html": ""}, format="json"
    ).json()
    alice = client_for(recipient)
    assert ids(alice.get("/api/v1/inbox/", {"since": since})) == [f"n{second['id']}"]
    clock.advance(seconds=20)  # the first one's TTL has passed, exactly
    listing = alice.get("/api/v1/inbox/").json()
    assert [i["id"] for i in listing["results"]] == [f"n{second['id']}"]
    assert listing["unread_count"] == 1
    assert alice.get("/api/v1/inbox/counts/").json()["unread"] == 1
    assert_error(alice.get(f"/api/v1/inbox/n{first['id']}/"), 404)


def test_subscription_errors(operator_client: Any, replenish: dict[str, Any], recipient: Any) -> None:
    group = make_group("pickers", recipient)
    base = {"message_type": "replenish", "scope": "WH1"}
    for payload in (
        base,  # neither user nor group
        {**base, "user": recipient.pk, "group": group.pk},  # both
        {**base, "user": 999_999},
        {**base, "group": 999_999},
        {**base, "message_type": "nope", "user": recipient.pk},
        {**base, "user": "1"},
        {**base, "scope": "", "user": recipient.pk},
        {"scope": "WH1", "user": recipient.pk},
    ):
        assert_error(operator_client.post(SUBS, payload, format="json"), 400)
    assert Subscription.objects.count() == 0
    assert operator_client.post(SUBS, {**base, "user": recipient.pk}, format="json").status_code == 201
    assert_error(operator_client.post(SUBS, {**base, "user": recipient.pk}, format="json"), 409, "duplicate")
    assert Subscription.objects.count() == 1
    sub_id = Subscription.objects.get().pk
    assert operator_client.delete(f"{SUBS}{sub_id}/").status_code == 204
    assert_error(operator_client.delete(f"{SUBS}{sub_id}/"), 404)


def test_notification_bad_inputs_change_nothing(
    operator_client: Any, replenish: dict[str, Any], recipient: Any
) -> None:
    operator_client.post(SUBS, {"message_type": "replenish", "scope": "WH1", "user": recipient.pk}, format="json")
    base = {"message_type": "replenish", "scope": "WH1", "title": "t", "body_html": ""}
    for payload in (
        {**base, "message_type": "nope"},
        {**base, "ttl_seconds": 0},
        {**base, "ttl_seconds": -1},
        {**base, "ttl_seconds": 1.5},
        {**base, "ttl_seconds": "60"},
        {**base, "ttl_seconds": True},
        {**base, "ttl_seconds": 10**12},
        {**base, "title": ""},
        {**base, "scope": 5},
        {k: v for k, v in base.items() if k != "title"},
    ):
        error = assert_error(operator_client.post(NOTIFY, payload, format="json"), 400)
        assert error.get("fields"), error
    assert Notification.objects.count() == 0
    assert client_for(recipient).get("/api/v1/inbox/").json()["results"] == []


def test_permissions(anon_client: Any, recipient: Any, replenish: dict[str, Any]) -> None:
    payloads = {
        TYPES: {"code": "x", "name": "X"},
        SUBS: {"message_type": "replenish", "scope": "WH1", "user": recipient.pk},
        NOTIFY: {"message_type": "replenish", "scope": "WH1", "title": "t", "body_html": ""},
    }
    staff = StaffFactory(username="staff-no-perms")
    for path, payload in payloads.items():
        assert_error(anon_client.post(path, payload, format="json"), 401)
        assert_error(client_for(recipient).post(path, payload, format="json"), 403)
        assert_error(client_for(staff).post(path, payload, format="json"), 403)
    assert_error(anon_client.delete(f"{SUBS}1/"), 401)
    assert_error(client_for(staff).delete(f"{SUBS}1/"), 403)
    staff.user_permissions.add(
        Permission.objects.get(codename="add_notification", content_type__app_label="messagecenter")
    )
    staff = type(staff).objects.get(pk=staff.pk)  # drop the permission cache
    assert client_for(staff).post(NOTIFY, payloads[NOTIFY], format="json").status_code == 202
    assert_error(client_for(staff).post(SUBS, payloads[SUBS], format="json"), 403)
    assert MessageType.objects.count() == 1
    assert Subscription.objects.count() == 0


def test_openapi_documents_the_endpoints(operator_client: Any) -> None:
    schema = operator_client.get("/api/schema/", {"format": "json"}).json()
    paths = schema["paths"]
    assert "201" in paths[TYPES]["post"]["responses"]
    assert {"201", "400", "401", "403", "409"} <= set(paths[SUBS]["post"]["responses"])
    assert {"204", "404"} <= set(paths[SUBS + "{subscription_id}/"]["delete"]["responses"])
    assert {"202", "400"} <= set(paths[NOTIFY]["post"]["responses"])
    components = schema["components"]["schemas"]
    assert "NotificationSendApiInputRequest" in components
    assert "SubscriptionCreateApiOutput" in components
