"""Operators' read-back: list, detail, paging, filters, 404/400 for every resource,
the members list, and a message's read count after a user reads it."""

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Any

import pytest
from django.utils import timezone

from messagecenter import services
from notices import services as notice_services
from tests.conftest import assert_error, client_for
from tests.factories import UserFactory
from tests.messagecenter.conftest import make_group, send

pytestmark = pytest.mark.django_db(transaction=True)

_serial = count(1)


def _announcement(operator: Any, recipient: Any) -> Any:
    n = next(_serial)
    return notice_services.announcement_create(
        author=operator, title=f"Announcement {n}", body_html="<p>b</p>", platforms=["user"]
    )


def _bulletin(operator: Any, recipient: Any) -> Any:
    n = next(_serial)
    return services.bulletin_create(
        title=f"Bulletin {n}", body_html="<p>b</p>", display_time=timezone.now(), group_ids=[], actor=operator
    )


def _message(operator: Any, recipient: Any) -> Any:
    return send(operator, to={"users": [recipient]}, title=f"Message {next(_serial)}")


def _group(operator: Any, recipient: Any) -> Any:
    return make_group(f"group-{next(_serial)}", recipient)


def _message_type(operator: Any, recipient: Any) -> Any:
    n = next(_serial)
    return services.message_type_create(code=f"type-{n}", name=f"Type {n}")


def _subscription(operator: Any, recipient: Any) -> Any:
    n = next(_serial)
    services.message_type_create(code=f"sub-type-{n}", name="T")
    return services.subscription_create(message_type=f"sub-type-{n}", scope="wh-1", user_id=recipient.pk, group_id=None)


def _notification(operator: Any, recipient: Any) -> Any:
    n = next(_serial)
    services.message_type_create(code=f"note-type-{n}", name="T")
    services.subscription_create(message_type=f"note-type-{n}", scope="wh-1", user_id=recipient.pk, group_id=None)
    return services.notification_send(message_type=f"note-type-{n}", scope="wh-1", title=f"Note {n}", body_html="b")


# resource path -> (factory, fields the create call accepts that the read-back must answer)
RESOURCES: dict[str, tuple[Callable[[Any, Any], Any], set[str]]] = {
    "announcements": (
        _announcement,
        {"title", "body_html", "summary", "platforms", "publish_at", "expire_at", "pinned"},
    ),
    "bulletins": (_bulletin, {"title", "body_html", "display_time", "expire_at", "user_groups"}),
    "messages": (
        _message,
        {"category", "title", "summary", "body_html", "link", "images", "to", "expire_at", "delivery"}
        | {"idempotency_key", "send_at", "recipients", "read_count", "status"},
    ),
    "user-groups": (_group, {"name", "member_count"}),
    "message-types": (_message_type, {"code", "name", "category", "default_ttl_seconds", "self_service"}),
    "subscriptions": (_subscription, {"message_type", "scope", "user", "group"}),
    "notifications": (
        _notification,
        {"message_type", "scope", "title", "body_html", "ttl_seconds", "send_at", "recipients", "status"},
    ),
}


@pytest.mark.parametrize("resource", list(RESOURCES))
def test_list_detail_paging_and_errors(resource: str, operator: Any, operator_client: Any, recipient: Any) -> None:
    factory, fields = RESOURCES[resource]
    made = [factory(operator, recipient) for _ in range(3)]
    base = f"/api/v1/manage/{resource}/"

    body = operator_client.get(base).json()
    assert set(body) == {"results", "next_cursor"}
    assert [item["id"] for item in body["results"]] == [str(obj.pk) for obj in reversed(made)]  # newest first
    assert body["next_cursor"] is None

    # Paging: two pages of 2 and 1; a row created between the pages is neither
    # repeated nor makes the second page skip one (it sorts above the cursor).
    first = operator_client.get(base, {"limit": 2}).json()
    assert [item["id"] for item in first["results"]] == [str(made[2].pk), str(made[1].pk)]
    newcomer = factory(operator, recipient)
    second = operator_client.get(base, {"limit": 2, "cursor": first["next_cursor"]}).json()
    assert [item["id"] for item in second["results"]] == [str(made[0].pk)]
    assert second["next_cursor"] is None
    assert operator_client.get(base, {"limit": 1}).json()["results"][0]["id"] == str(newcomer.pk)

    # Detail: the create call's fields, id and created_at.
    detail = operator_client.get(f"{base}{made[0].pk}/")
    assert detail.status_code == 200, detail.content
    item = detail.json()
    assert item["id"] == str(made[0].pk)
    assert fields | {"id", "created_at"} <= set(item), set(item)
    datetime.fromisoformat(item["created_at"])
    assert item["created_at"].endswith("+00:00")
    assert item == next(i for i in operator_client.get(base).json()["results"] if i["id"] == item["id"])

    assert_error(operator_client.get(f"{base}987654321/"), 404, "not_found")
    assert_error(operator_client.get(f"{base}abc/"), 400)
    assert_error(operator_client.get(f"{base}0/"), 400)
    for bad in ("0", "-1", "abc"):
        assert_error(operator_client.get(base, {"limit": bad}), 400)
    assert operator_client.get(base, {"limit": 5000}).status_code == 200  # capped, not refused
    assert_error(operator_client.get(base, {"cursor": "forged"}), 400, "invalid_cursor")
    assert_error(operator_client.get(base, {"cursor": first["next_cursor"] + "x"}), 400, "invalid_cursor")
    # A cursor of another list, or of this list under other filters, is refused.
    other = "messages" if resource != "messages" else "bulletins"
    assert_error(operator_client.get(f"/api/v1/manage/{other}/", {"cursor": first["next_cursor"]}), 400)
    assert_error(operator_client.get(base, {"cursor": first["next_cursor"], "since": "2020-01-01T00:00:00"}), 400)
    assert_error(operator_client.get(base, {"since": "yesterday"}), 400)


@pytest.mark.parametrize("resource", list(RESOURCES))
def test_since_filter(resource: str, operator: Any, operator_client: Any, recipient: Any) -> None:
    factory, _fields = RESOURCES[resource]
    old = factory(operator, recipient)
    cut = old.created_at
    new = factory(operator, recipient)
    results = operator_client.get(f"/api/v1/manage/{resource}/", {"since": cut.isoformat()}).json()["results"]
    assert [item["id"] for item in results] == [str(new.pk)]


def test_ties_on_created_at_page_by_id(operator: Any, operator_client: Any, recipient: Any, clock: Any) -> None:
    # The clock stands still: every message has the same created_at.
    made = [send(operator, to={"users": [recipient]}, title=f"m{i}") for i in range(5)]
    seen, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        body = operator_client.get("/api/v1/manage/messages/", params).json()
        seen += [item["id"] for item in body["results"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == [str(m.pk) for m in reversed(made)]


def test_message_filters_and_fields(operator: Any, operator_client: Any, recipient: Any, clock: Any) -> None:
    group = make_group("vip", recipient)
    promo = send(operator, to={"groups": [group]}, category="promotion", title="Sale", link="https://example.com/x")
    system = send(operator, to={"users": [recipient]}, title="Plain")
    everyone = send(operator, to={"everyone": True}, title="All")
    services.message_retract(message=system, actor=operator)
    base = "/api/v1/manage/messages/"

    def ids(**params: Any) -> list[str]:
        return [item["id"] for item in operator_client.get(base, params).json()["results"]]

    assert ids(category="promotion") == [str(promo.pk)]
    assert ids(group=str(group.pk)) == [str(promo.pk)]
    assert ids(status="retracted") == [str(system.pk)]
    assert ids(delivery="pull") == [str(everyone.pk)]
    assert_error(operator_client.get(base, {"category": "nope"}), 400)
    assert_error(operator_client.get(base, {"group": "x1"}), 400)
    assert_error(operator_client.get(base, {"status": "lost"}), 400)

    item = operator_client.get(f"{base}{promo.pk}/").json()
    assert item["to"] == {"users": [], "groups": [str(group.pk)], "everyone": False}
    assert item["link"] == "https://example.com/x"
    assert item["delivery"] == "push"
    assert item["recipients"] == 1
    assert item["sender"] == operator.username
    all_item = operator_client.get(f"{base}{everyone.pk}/").json()
    assert all_item["recipients"] is None
    assert all_item["to"]["everyone"] is True
    direct = operator_client.get(f"{base}{system.pk}/").json()
    assert direct["to"]["users"] == [str(recipient.pk)]
    assert direct["status"] == "retracted"


def test_read_count_follows_reads(
    operator: Any, operator_client: Any, recipient: Any, recipient_client: Any, other_recipient: Any
) -> None:
    message = send(operator, to={"users": [recipient, other_recipient]}, title="Count me")
    untouched = send(operator, to={"users": [recipient]}, title="Nobody reads me")
    url = f"/api/v1/manage/messages/{message.pk}/"
    assert operator_client.get(url).json()["read_count"] == 0
    assert recipient_client.post(f"/api/v1/inbox/m{message.pk}/read/").status_code == 204
    assert operator_client.get(url).json()["read_count"] == 1
    # Read, unread and read again: still one reader.
    recipient_client.post(f"/api/v1/inbox/m{message.pk}/unread/")
    recipient_client.post(f"/api/v1/inbox/m{message.pk}/read/")
    assert operator_client.get(url).json()["read_count"] == 1
    assert client_for(other_recipient).post(f"/api/v1/inbox/m{message.pk}/read/").status_code == 204
    assert operator_client.get(url).json()["read_count"] == 2
    listed = {
        item["id"]: item["read_count"] for item in operator_client.get("/api/v1/manage/messages/").json()["results"]
    }
    assert listed == {str(message.pk): 2, str(untouched.pk): 0}
    # GET never changes state: the operator's reads marked nothing for anyone.
    assert recipient_client.get(f"/api/v1/inbox/m{untouched.pk}/").json()["read"] is False


def test_user_groups_and_members(operator: Any, operator_client: Any, recipient: Any, other_recipient: Any) -> None:
    extra = [UserFactory(username=f"member-{i}") for i in range(3)]
    group = make_group("crew", recipient, other_recipient)
    services.user_group_add_members(group=group, user_ids=[u.pk for u in extra])
    make_group("empty")
    listed = operator_client.get("/api/v1/manage/user-groups/", {"name": "cre"}).json()["results"]
    assert [(g["name"], g["member_count"]) for g in listed] == [("crew", 5)]
    assert operator_client.get(f"/api/v1/manage/user-groups/{group.pk}/").json()["member_count"] == 5

    url = f"/api/v1/manage/user-groups/{group.pk}/members/"
    seen, cursor = [], None
    while True:
        body = operator_client.get(url, {"limit": 2, **({"cursor": cursor} if cursor else {})}).json()
        assert all(set(m) >= {"id", "username"} for m in body["results"])
        seen += [(m["id"], m["username"]) for m in body["results"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    expected = {(str(u.pk), u.username) for u in [recipient, other_recipient, *extra]}
    assert len(seen) == 5
    assert set(seen) == expected
    assert_error(operator_client.get("/api/v1/manage/user-groups/987654/members/"), 404)
    assert_error(operator_client.get("/api/v1/manage/user-groups/x7/members/"), 400, "invalid_id")
    # A write with a malformed id is a 400 too.
    response = operator_client.post("/api/v1/manage/user-groups/x7/members/", {"user_ids": [1]}, format="json")
    assert_error(response, 400, "invalid_id")
    assert_error(operator_client.get(url, {"limit": "0"}), 400)
    assert_error(operator_client.get(url, {"cursor": "garbage"}), 400)


def test_other_filters(operator: Any, operator_client: Any, recipient: Any, clock: Any) -> None:
    group = make_group("ops", recipient)
    now = clock.now
    grouped = services.bulletin_create(title="G", body_html="b", display_time=now, group_ids=[group.pk], actor=operator)
    later = services.bulletin_create(
        title="L", body_html="b", display_time=now + timedelta(days=1), group_ids=[], actor=operator
    )

    def ids(path: str, **params: Any) -> list[str]:
        response = operator_client.get(f"/api/v1/manage/{path}/", params)
        assert response.status_code == 200, response.content
        return [item["id"] for item in response.json()["results"]]

    assert ids("bulletins", group=group.pk) == [str(grouped.pk)]
    assert ids("bulletins", status="scheduled") == [str(later.pk)]
    assert ids("bulletins", status="live") == [str(grouped.pk)]

    services.message_type_create(code="low-stock", name="Low", category="transaction")
    services.message_type_create(code="other", name="Other")
    by_user = services.subscription_create(message_type="low-stock", scope="wh-1", user_id=recipient.pk, group_id=None)
    by_group = services.subscription_create(message_type="other", scope="wh-2", user_id=None, group_id=group.pk)
    assert [
        t["code"]
        for t in operator_client.get("/api/v1/manage/message-types/", {"category": "transaction"}).json()["results"]
    ] == ["low-stock"]
    assert ids("subscriptions", message_type="low-stock") == [str(by_user.pk)]
    assert ids("subscriptions", scope="wh-2") == [str(by_group.pk)]
    assert ids("subscriptions", user=recipient.pk) == [str(by_user.pk)]
    assert ids("subscriptions", group=group.pk) == [str(by_group.pk)]
    note = services.notification_send(message_type="low-stock", scope="wh-1", title="N", body_html="b")
    services.notification_send(message_type="other", scope="wh-2", title="O", body_html="b")
    assert ids("notifications", message_type="low-stock") == [str(note.pk)]
    assert ids("notifications", category="transaction") == [str(note.pk)]

    notice_services.announcement_create(author=operator, title="U", body_html="b", platforms=["user"])
    pinned = notice_services.announcement_create(
        author=operator, title="C", body_html="b", platforms=["customer"], pinned=True
    )
    future = notice_services.announcement_create(
        author=operator, title="F", body_html="b", platforms=["user"], publish_at=datetime(2027, 1, 1, tzinfo=UTC)
    )
    assert ids("announcements", platform="customer") == [str(pinned.pk)]
    assert ids("announcements", pinned="true") == [str(pinned.pk)]
    assert ids("announcements", status="scheduled") == [str(future.pk)]
    assert_error(operator_client.get("/api/v1/manage/announcements/", {"status": "gone"}), 400)
    assert_error(operator_client.get("/api/v1/manage/announcements/", {"platform": "mars"}), 400)


def test_scheduled_message_reads_back_with_send_at_status_and_key(
    operator: Any, operator_client: Any, recipient: Any, clock: Any
) -> None:
    send_at = clock.now + timedelta(hours=2)
    body = {
        "category": "system",
        "title": "Later",
        "body_html": "<p>Soon</p>",
        "to": {"users": [recipient.pk]},
        "send_at": send_at.isoformat(),
        "idempotency_key": "night-run-7",
    }
    created = operator_client.post("/api/v1/manage/messages/", body, format="json")
    assert created.status_code == 202, created.content
    url = f"/api/v1/manage/messages/{created.json()['id']}/"
    item = operator_client.get(url).json()
    expected = ("scheduled", send_at.isoformat(), "night-run-7")
    assert (item["status"], item["send_at"], item["idempotency_key"]) == expected
    listed = operator_client.get("/api/v1/manage/messages/", {"status": "scheduled"}).json()["results"]
    assert listed == [item]

    clock.advance(hours=3)
    assert services.scheduled_send_due() == 1
    sent = operator_client.get(url).json()
    assert sent["status"] == "delivered"
    assert sent["send_at"] == send_at.isoformat()  # kept: it was scheduled for then
    assert sent["idempotency_key"] == "night-run-7"

    # A message sent at once, without a key, says so with nulls.
    plain = send(operator, to={"users": [recipient]}, title="Now")
    now_item = operator_client.get(f"/api/v1/manage/messages/{plain.pk}/").json()
    assert (now_item["send_at"], now_item["idempotency_key"]) == (None, None)

    # Once the key's window is over and the clean-up ran, the key no longer reads back.
    clock.advance(hours=24)
    assert services.message_send_keys_purge() == 1
    assert operator_client.get(url).json()["idempotency_key"] is None


def test_idempotency_key_from_the_header_reads_back(operator_client: Any, recipient: Any) -> None:
    body = {"category": "system", "title": "Once", "body_html": "x", "to": {"users": [recipient.pk]}}
    created = operator_client.post("/api/v1/manage/messages/", body, format="json", HTTP_IDEMPOTENCY_KEY="hdr-1")
    assert created.status_code == 202, created.content
    item = operator_client.get(f"/api/v1/manage/messages/{created.json()['id']}/").json()
    assert item["idempotency_key"] == "hdr-1"


def test_notification_reads_back_its_schedule_and_status(operator_client: Any, recipient: Any, clock: Any) -> None:
    services.message_type_create(code="restock", name="Restock")
    services.subscription_create(message_type="restock", scope="wh-1", user_id=recipient.pk, group_id=None)
    base = "/api/v1/manage/notifications/"
    send_at = clock.now + timedelta(hours=1)
    body = {"message_type": "restock", "scope": "wh-1", "title": "Later", "body_html": "b", "ttl_seconds": 3600}
    created = operator_client.post(base, {**body, "send_at": send_at.isoformat()}, format="json")
    assert created.status_code == 202, created.content
    later_url = f"{base}{created.json()['id']}/"
    item = operator_client.get(later_url).json()
    # Scheduled: no recipients yet, not withdrawn, and the status says why.
    assert (item["status"], item["send_at"], item["recipients"], item["withdrawn"]) == (
        "scheduled",
        send_at.isoformat(),
        0,
        False,
    )
    assert item["ttl_seconds"] == 3600
    cancelled = operator_client.post(base, {**body, "send_at": send_at.isoformat()}, format="json").json()
    now = operator_client.post(base, body, format="json").json()
    assert operator_client.delete(f"{base}{cancelled['id']}/").status_code == 204

    def status_of(notification_id: Any) -> tuple[str, Any, int]:
        answer = operator_client.get(f"{base}{notification_id}/").json()
        return answer["status"], answer["send_at"], answer["recipients"]

    assert status_of(now["id"]) == ("sent", None, 1)
    assert status_of(cancelled["id"]) == ("cancelled", send_at.isoformat(), 0)

    clock.advance(hours=2)
    assert services.scheduled_send_due() == 1
    assert status_of(created.json()["id"]) == ("sent", send_at.isoformat(), 1)
    assert operator_client.delete(later_url).status_code == 204
    assert status_of(created.json()["id"]) == ("withdrawn", send_at.isoformat(), 1)
    # The list answers the same objects as the details.
    listed = {row["id"]: row["status"] for row in operator_client.get(base).json()["results"]}
    assert listed == {created.json()["id"]: "withdrawn", cancelled["id"]: "cancelled", now["id"]: "sent"}
