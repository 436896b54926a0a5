"""The v1.1 REST contract as an outside client sees it: only HTTP calls, only
what the contract promises. Operators create things through the manage API;
users archive, snooze, search, bulk-edit and mute their inbox, follow
self-service message types; operators read everything back and find their
writes in the audit trail. Every 4xx is checked to be the error envelope,
every id input is tried in its string and its JSON integer form."""

from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest
from rest_framework.test import APIClient
from time_machine import TimeMachineFixture

from tests.conftest import assert_error
from tests.conftest import client_for as token_client_for

pytestmark = pytest.mark.django_db(transaction=True)

ITEM_FIELDS = {"id", "kind", "category", "title", "summary", "created_at", "read"}


def client_for(user: Any) -> APIClient:
    """A token-authenticated client that sends JSON bodies (the API takes JSON only)."""
    client = token_client_for(user)
    client.default_format = "json"
    return client


def _ok(response: Any, status: int) -> Any:
    assert response.status_code == status, (response.status_code, response.content)
    return response.json() if response.content else None


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def _is_time(value: Any) -> bool:
    return isinstance(value, str) and datetime.fromisoformat(value).utcoffset() is not None


def _send(op: APIClient, users: list[Any], title: str, category: str = "promotion", **extra: Any) -> dict[str, Any]:
    body = {"category": category, "title": title, "body_html": "<p>x</p>", "to": {"users": users}, **extra}
    return dict(_ok(op.post("/api/v1/manage/messages/", body, format="json"), 202))


def _inbox(client: APIClient, query: str = "") -> dict[str, Any]:
    return dict(_ok(client.get(f"/api/v1/inbox/?{query}"), 200))


def _titles(client: APIClient, query: str = "") -> list[str]:
    return [item["title"] for item in _inbox(client, query)["results"]]


def _counts(client: APIClient) -> dict[str, Any]:
    return dict(_ok(client.get("/api/v1/inbox/counts/"), 200))


def _walk(client: APIClient, path: str, limit: int) -> list[dict[str, Any]]:
    """Every result of a paged list, following next_cursor."""
    seen: list[dict[str, Any]] = []
    cursor = None
    sep = "&" if "?" in path else "?"
    for _ in range(50):
        query = f"{path}{sep}limit={limit}" + (f"&cursor={quote(cursor)}" if cursor else "")
        page = _ok(client.get(query), 200)
        assert set(page) >= {"results", "next_cursor"}
        assert len(page["results"]) <= limit
        seen.extend(page["results"])
        cursor = page["next_cursor"]
        if cursor is None:
            return seen
        assert isinstance(cursor, str)
    raise AssertionError("paging never ended")


def _assert_list_rules(client: APIClient, path: str) -> None:
    """limit: non-positive or non-numeric 400, large capped; forged cursor 400."""
    sep = "&" if "?" in path else "?"
    for bad in ("limit=0", "limit=-1", "limit=abc", "limit=1.5", "cursor=garbage", "cursor=AAAA"):
        assert_error(client.get(f"{path}{sep}{bad}"), 400)
    _ok(client.get(f"{path}{sep}limit=1000"), 200)


# -- inbox: archive, unarchive ----------------------------------------------------


def test_archive_and_unarchive(operator: Any, recipient: Any, outsider: Any) -> None:
    op, me, out = client_for(operator), client_for(recipient), client_for(outsider)
    for title in ("a1", "a2", "a3"):
        _send(op, [recipient.pk], title)
    ids = {item["title"]: item["id"] for item in _inbox(me)["results"]}
    assert all(isinstance(value, str) for value in ids.values())
    _ok(me.post(f"/api/v1/inbox/{ids['a1']}/read/"), 204)
    before = _counts(me)
    assert before["unread"] == 2

    # Archiving an unread item takes it out of the list and every count.
    _ok(me.post(f"/api/v1/inbox/{ids['a2']}/archive/"), 204)
    assert _titles(me) == ["a3", "a1"]
    page = _inbox(me)
    counts = _counts(me)
    assert counts["unread"] == page["unread_count"] == 1
    assert counts["by_category"]["promotion"] == 1
    assert counts["total_unread"] == 1
    assert page["unseen_count"] == 2

    _ok(me.post(f"/api/v1/inbox/{ids['a1']}/archive/"), 204)
    archived = _inbox(me, "archived=true")
    assert [item["title"] for item in archived["results"]] == ["a2", "a1"]
    assert set(archived["results"][0]) >= ITEM_FIELDS
    assert [item["read"] for item in archived["results"]] == [False, True]
    assert [item["title"] for item in _walk(me, "/api/v1/inbox/?archived=true", 1)] == ["a2", "a1"]
    assert _titles(me, "archived=false") == ["a3"]
    assert_error(me.get("/api/v1/inbox/?archived=maybe"), 400)

    # Another user's item, an unknown one, a malformed one.
    assert_error(out.post(f"/api/v1/inbox/{ids['a3']}/archive/"), 404)
    assert_error(out.post(f"/api/v1/inbox/{ids['a2']}/unarchive/"), 404)
    assert _titles(me) == ["a3"]

    # Unarchiving puts it back as it was: unread stays unread, read stays read.
    _ok(me.post(f"/api/v1/inbox/{ids['a2']}/unarchive/"), 204)
    _ok(me.post(f"/api/v1/inbox/{ids['a1']}/unarchive/"), 204)
    assert _titles(me) == ["a3", "a2", "a1"]
    assert [item["read"] for item in _inbox(me)["results"]] == [False, False, True]
    assert _counts(me)["unread"] == 2
    assert _inbox(me, "archived=true")["results"] == []


def test_inbox_item_ids_unknown_and_malformed(recipient: Any) -> None:
    me = client_for(recipient)
    for action in ("read", "unread", "archive", "unarchive"):
        assert_error(me.post(f"/api/v1/inbox/m999999/{action}/"), 404)
    assert_error(me.post("/api/v1/inbox/m999999/snooze/", {"until": _iso(datetime.now(UTC) + timedelta(hours=1))}), 404)
    assert_error(me.get("/api/v1/inbox/m999999/"), 404)


# -- inbox: snooze ------------------------------------------------------------------


def test_snooze_rules_and_return(
    operator: Any, recipient: Any, outsider: Any, time_machine: TimeMachineFixture
) -> None:
    time_machine.move_to(datetime.now(UTC), tick=False)
    op, me, out = client_for(operator), client_for(recipient), client_for(outsider)
    _send(op, [recipient.pk], "older")
    _send(op, [recipient.pk], "newer")
    ids = {item["title"]: item["id"] for item in _inbox(me)["results"]}
    snooze = f"/api/v1/inbox/{ids['older']}/snooze/"
    now = datetime.now(UTC)

    for bad in (
        {"until": _iso(now - timedelta(minutes=1))},
        {"until": _iso(now + timedelta(days=367))},
        {"until": "tomorrow"},
        {"until": None},
        {},
    ):
        assert_error(me.post(snooze, bad, format="json"), 400)
    assert_error(out.post(snooze, {"until": _iso(now + timedelta(hours=1))}, format="json"), 404)
    assert _titles(me) == ["newer", "older"]

    # Snoozed: out of the list and the counts; read state does not matter, it comes back unread.
    _ok(me.post(f"/api/v1/inbox/{ids['older']}/read/"), 204)
    until = datetime.now(UTC) + timedelta(seconds=3)
    _ok(me.post(snooze, {"until": _iso(until)}, format="json"), 204)
    assert _titles(me) == ["newer"]
    counts = _counts(me)
    assert counts["unread"] == 1
    assert counts["total_unread"] == 1
    time_machine.shift(timedelta(seconds=3.5))
    page = _inbox(me)
    assert [item["title"] for item in page["results"]] == ["older", "newer"]
    assert page["results"][0]["read"] is False
    assert _counts(me)["unread"] == 2


# -- inbox: bulk -----------------------------------------------------------------


def test_bulk_actions(operator: Any, recipient: Any, other_recipient: Any) -> None:
    op, me, bob = client_for(operator), client_for(recipient), client_for(other_recipient)
    for title in ("b1", "b2", "b3"):
        _send(op, [recipient.pk], title)
    _send(op, [other_recipient.pk], "bobs")
    mine = [item["id"] for item in _inbox(me)["results"]]
    (bobs,) = [item["id"] for item in _inbox(bob)["results"]]
    bulk = "/api/v1/inbox/bulk/"

    # Ids of someone else's inbox are ignored and never revealed.
    assert _ok(me.post(bulk, {"action": "read", "ids": [*mine, bobs]}, format="json"), 200) == {"done": 3}
    assert _counts(me)["unread"] == 0
    assert _inbox(bob)["results"][0]["read"] is False
    assert _ok(me.post(bulk, {"action": "unread", "ids": mine[:2]}, format="json"), 200) == {"done": 2}
    assert _counts(me)["unread"] == 2
    assert _ok(me.post(bulk, {"action": "archive", "ids": mine[:2]}, format="json"), 200) == {"done": 2}
    assert _titles(me) == ["b1"]
    assert _titles(me, "archived=true") == ["b3", "b2"]
    assert _ok(me.post(bulk, {"action": "unarchive", "ids": mine[:1]}, format="json"), 200) == {"done": 1}
    assert _titles(me) == ["b3", "b1"]
    assert _ok(me.post(bulk, {"action": "delete", "ids": [mine[2], bobs]}, format="json"), 200) == {"done": 1}
    assert _titles(me) == ["b3"]
    assert _titles(bob) == ["bobs"]
    assert _ok(me.post(bulk, {"action": "read", "ids": ["m999999"]}, format="json"), 200) == {"done": 0}

    for bad in (
        {"action": "explode", "ids": mine[:1]},
        {"action": "read", "ids": []},
        {"action": "read", "ids": [f"m{n}" for n in range(1, 102)]},
        {"action": "read"},
        {"ids": mine[:1]},
        {"action": "read", "ids": "m1"},
    ):
        assert_error(me.post(bulk, bad, format="json"), 400)
    assert _counts(me)["unread"] == 1
    # Exactly 100 ids is allowed.
    ids_100 = [mine[0]] + [f"m{n}" for n in range(900000, 900099)]
    assert _ok(me.post(bulk, {"action": "read", "ids": ids_100}, format="json"), 200) == {"done": 1}


# -- inbox: q ----------------------------------------------------------------------


def test_search(operator: Any, recipient: Any) -> None:
    op, me = client_for(operator), client_for(recipient)
    _send(op, [recipient.pk], "Invoice ready", category="transaction")
    _send(op, [recipient.pk], "Spring SALE", category="promotion", summary="big invoice discounts")
    _send(op, [recipient.pk], "仓库补货通知", category="system")
    _send(op, [recipient.pk], "Nothing here", category="promotion")

    assert _titles(me, "q=invoice") == ["Spring SALE", "Invoice ready"]
    assert _titles(me, "q=INVOICE&category=transaction") == ["Invoice ready"]
    assert _titles(me, "q=sale") == ["Spring SALE"]
    assert _titles(me, "q=补货") == ["仓库补货通知"]
    assert _titles(me, "q=nomatch") == []
    assert [item["title"] for item in _walk(me, "/api/v1/inbox/?q=invoice", 1)] == ["Spring SALE", "Invoice ready"]

    first = _inbox(me, "q=invoice")["results"]
    _ok(me.post(f"/api/v1/inbox/{first[0]['id']}/read/"), 204)
    assert _titles(me, "q=invoice&unread=true") == ["Invoice ready"]
    _ok(me.post(f"/api/v1/inbox/{first[1]['id']}/archive/"), 204)
    assert _titles(me, "q=invoice") == ["Spring SALE"]
    assert _titles(me, "q=invoice&archived=true") == ["Invoice ready"]


# -- counts: total_unread ------------------------------------------------------------


def test_total_unread_adds_unread_announcements(operator: Any, recipient: Any) -> None:
    op, me = client_for(operator), client_for(recipient)
    _send(op, [recipient.pk], "m1")
    _send(op, [recipient.pk], "m2")
    created = [
        _ok(op.post("/api/v1/manage/announcements/", {"title": t, "body_html": "x", "platforms": ["user"]}), 201)
        for t in ("an1", "an2", "an3")
    ]
    counts = _counts(me)
    assert isinstance(counts["total_unread"], int)
    assert counts["by_category"]["announcement"] == 3
    assert counts["total_unread"] == counts["unread"] + 3 == 5
    _ok(me.post(f"/api/v1/announcements/{created[0]['id']}/read/"), 204)
    _ok(op.delete(f"/api/v1/manage/announcements/{created[1]['id']}/"), 204)
    assert _counts(me)["total_unread"] == 3
    assert _ok(me.get("/api/v1/announcements/counts/"), 200) == {"read": 1, "unread": 1}


# -- preferences ------------------------------------------------------------------------


def test_preferences_and_mutes(operator: Any, recipient: Any, anon_client: APIClient) -> None:
    op, me = client_for(operator), client_for(recipient)
    prefs = "/api/v1/me/preferences/"
    assert_error(anon_client.get(prefs), 401)
    stored = _ok(me.get(prefs), 200)
    assert stored["muted_categories"] == []
    assert stored["muted_message_types"] == []

    _ok(op.post("/api/v1/manage/message-types/", {"code": "stock", "name": "Stock"}, format="json"), 201)
    _ok(
        op.post(
            "/api/v1/manage/subscriptions/",
            {"message_type": "stock", "scope": "WH1", "user": str(recipient.pk)},
            format="json",
        ),
        201,
    )
    answer = _ok(
        me.put(prefs, {"muted_categories": ["promotion"], "muted_message_types": ["stock"]}, format="json"), 200
    )
    assert answer["muted_categories"] == ["promotion"]
    assert answer["muted_message_types"] == ["stock"]
    assert _ok(me.get(prefs), 200)["muted_categories"] == ["promotion"]

    # Unknown names: 400, nothing changed.
    for bad in (
        {"muted_categories": ["bogus"], "muted_message_types": []},
        {"muted_categories": [], "muted_message_types": ["nope"]},
        {"muted_categories": "promotion", "muted_message_types": []},
    ):
        assert_error(me.put(prefs, bad, format="json"), 400)
    assert _ok(me.get(prefs), 200)["muted_message_types"] == ["stock"]

    # Muted items never show or count; others do.
    _send(op, [recipient.pk], "muted promo", category="promotion")
    _send(op, [recipient.pk], "shown", category="transaction")
    notification = {"message_type": "stock", "scope": "WH1", "title": "muted stock", "body_html": "x"}
    _ok(op.post("/api/v1/manage/notifications/", notification, format="json"), 202)
    assert _titles(me) == ["shown"]
    assert _titles(me, "category=promotion") == []
    counts = _counts(me)
    assert (counts["unread"], counts["total_unread"], counts["by_category"]["promotion"]) == (1, 1, 0)
    assert counts["by_category"]["system"] == 0
    assert _inbox(me)["unseen_count"] == 1

    # Unmuting does not bring back what arrived while muted; new items show.
    _ok(me.put(prefs, {"muted_categories": [], "muted_message_types": []}, format="json"), 200)
    assert _titles(me) == ["shown"]
    _send(op, [recipient.pk], "after", category="promotion")
    assert _titles(me) == ["after", "shown"]
    assert _counts(me)["unread"] == 2


# -- my subscriptions --------------------------------------------------------------------


def test_my_subscriptions(operator: Any, recipient: Any, outsider: Any) -> None:
    op, me, out = client_for(operator), client_for(recipient), client_for(outsider)
    mine = "/api/v1/me/subscriptions/"
    created = _ok(
        op.post(
            "/api/v1/manage/message-types/",
            {"code": "price", "name": "Price", "self_service": True},
            format="json",
        ),
        201,
    )
    assert created["self_service"] is True
    _ok(op.post("/api/v1/manage/message-types/", {"code": "ops", "name": "Ops only"}, format="json"), 201)
    group = _ok(op.post("/api/v1/manage/user-groups/", {"name": "buyers"}, format="json"), 201)["id"]
    _ok(op.post(f"/api/v1/manage/user-groups/{group}/members/", {"user_ids": [str(recipient.pk)]}, format="json"), 200)
    group_sub = _ok(
        op.post("/api/v1/manage/subscriptions/", {"message_type": "price", "scope": "G", "group": group}), 201
    )

    assert _ok(me.get(mine), 200) == {"results": []}
    sub = _ok(me.post(mine, {"message_type": "price", "scope": "S1"}, format="json"), 201)
    assert isinstance(sub["id"], str)
    assert (sub["message_type"], sub["scope"]) == ("price", "S1")
    assert_error(me.post(mine, {"message_type": "price", "scope": "S1"}, format="json"), 409)
    assert_error(me.post(mine, {"message_type": "ops", "scope": "S1"}, format="json"), 403)
    assert_error(me.post(mine, {"message_type": "unknown", "scope": "S1"}, format="json"), 400)
    assert_error(me.post(mine, {"message_type": "price"}, format="json"), 400)
    listed = _ok(me.get(mine), 200)["results"]
    assert listed == [{"id": sub["id"], "message_type": "price", "scope": "S1"}]

    # The subscription works: a notification reaches the user.
    note = {"message_type": "price", "scope": "S1", "title": "price drop", "body_html": "x"}
    assert _ok(op.post("/api/v1/manage/notifications/", note, format="json"), 202)["recipients"] == 1
    assert _titles(me) == ["price drop"]

    # An outsider's list holds only their own; someone else's id is unknown to
    # them whatever they try, and nothing changes.
    assert _ok(out.get(mine), 200) == {"results": []}
    theirs = _ok(out.post(mine, {"message_type": "price", "scope": "S1"}, format="json"), 201)
    assert theirs["id"] != sub["id"]
    assert _ok(out.get(mine), 200)["results"] == [{"id": theirs["id"], "message_type": "price", "scope": "S1"}]
    assert_error(out.delete(f"{mine}{sub['id']}/"), 404)
    unknown = out.get(f"{mine}999999/")
    seen = out.get(f"{mine}{sub['id']}/")
    assert seen.status_code >= 400
    assert (seen.status_code, seen.json()) == (unknown.status_code, unknown.json())  # no sign it exists
    assert "S1" not in seen.content.decode()
    assert _ok(me.get(mine), 200)["results"] == listed
    # The group's subscription is not the member's own: not listed, not deletable.
    assert_error(me.delete(f"{mine}{group_sub['id']}/"), 404)
    _ok(out.delete(f"{mine}{theirs['id']}/"), 204)
    assert _ok(out.get(mine), 200) == {"results": []}
    assert _ok(me.get(mine), 200)["results"] == listed

    assert_error(me.delete(f"{mine}abc/"), 400)
    assert_error(me.delete(f"{mine}999999/"), 404)
    _ok(me.delete(f"{mine}{sub['id']}/"), 204)
    assert _ok(me.get(mine), 200) == {"results": []}
    assert_error(me.delete(f"{mine}{sub['id']}/"), 404)


# -- operators: read-back -------------------------------------------------------------


def _create_three(op: APIClient, recipient: Any, group: str) -> dict[str, tuple[str, list[str], set[str]]]:
    """Create three of each resource; answer path -> (list path, ids newest first, fields)."""
    soon = _iso(datetime.now(UTC) + timedelta(days=3))
    made: dict[str, tuple[str, list[str], set[str]]] = {}

    def three(path: str, bodies: list[dict[str, Any]], status: int, fields: set[str]) -> None:
        ids = [str(_ok(op.post(path, body, format="json"), status)["id"]) for body in bodies]
        made[path] = (path, ids[::-1], fields)

    three(
        "/api/v1/manage/announcements/",
        [{"title": f"an{n}", "body_html": "x", "platforms": ["user"], "expire_at": soon} for n in range(3)],
        201,
        {"title", "body_html", "summary", "platforms", "publish_at", "expire_at", "pinned"},
    )
    three(
        "/api/v1/manage/bulletins/",
        [
            {"title": f"bu{n}", "body_html": "x", "display_time": "2020-01-01T00:00:00Z", "user_groups": [group]}
            for n in range(3)
        ],
        201,
        {"title", "body_html", "display_time", "expire_at", "user_groups"},
    )
    three(
        "/api/v1/manage/messages/",
        [
            {"category": "system", "title": f"me{n}", "body_html": "x", "to": {"users": [recipient.pk]}}
            for n in range(3)
        ],
        202,
        {"category", "title", "summary", "body_html", "link", "images", "to", "expire_at", "delivery"}
        | {"idempotency_key", "send_at", "recipients", "read_count"},
    )
    three(
        "/api/v1/manage/user-groups/",
        [{"name": f"grp{n}"} for n in range(3)],
        201,
        {"name", "member_count"},
    )
    three(
        "/api/v1/manage/message-types/",
        [{"code": f"mt{n}", "name": f"Type {n}", "category": "system"} for n in range(3)],
        201,
        {"code", "name", "category", "default_ttl_seconds", "self_service"},
    )
    three(
        "/api/v1/manage/subscriptions/",
        [{"message_type": "mt0", "scope": f"S{n}", "user": recipient.pk} for n in range(3)],
        201,
        {"message_type", "scope", "user", "group"},
    )
    return made


def test_manage_read_back(operator: Any, recipient: Any, anon_client: APIClient) -> None:
    op, me = client_for(operator), client_for(recipient)
    group = _ok(op.post("/api/v1/manage/user-groups/", {"name": "base"}, format="json"), 201)["id"]
    made = _create_three(op, recipient, group)
    for path, ids, fields in made.values():
        assert_error(anon_client.get(path), 401)
        assert_error(me.get(path), 403)
        page = _ok(op.get(path), 200)
        assert set(page) >= {"results", "next_cursor"}
        listed = [row["id"] for row in page["results"]]
        assert all(isinstance(value, str) for value in listed), (path, listed)
        # Newest first; paging with next_cursor neither repeats nor skips.
        assert [i for i in listed if i in ids] == ids, (path, listed)
        walked = [row["id"] for row in _walk(op, path, 2)]
        assert walked == listed, path
        assert len(set(walked)) == len(walked)
        _assert_list_rules(op, path)
        for row in page["results"]:
            assert set(row) >= {"id", "created_at"} | fields, (path, set(row))
            assert _is_time(row["created_at"]), (path, row)
        for item_id in ids:
            detail = _ok(op.get(f"{path}{item_id}/"), 200)
            assert detail["id"] == item_id
            assert set(detail) >= {"id", "created_at"} | fields, (path, set(detail))
            assert _is_time(detail["created_at"])
            assert_error(me.get(f"{path}{item_id}/"), 403)
        assert_error(op.get(f"{path}999999999/"), 404)
        assert_error(op.get(f"{path}abc/"), 400)
        assert_error(op.get(f"{path}0/"), 400)

    # Specific fields.
    _, message_ids, _ = made["/api/v1/manage/messages/"]
    message = _ok(op.get(f"/api/v1/manage/messages/{message_ids[0]}/"), 200)
    assert message["delivery"] in {"push", "pull"}
    assert message["recipients"] is None or isinstance(message["recipients"], int)
    assert message["read_count"] == 0
    assert message["title"] == "me2"
    (item,) = [i for i in _inbox(me)["results"] if i["title"] == "me2"]
    _ok(me.post(f"/api/v1/inbox/{item['id']}/read/"), 204)
    assert _ok(op.get(f"/api/v1/manage/messages/{message_ids[0]}/"), 200)["read_count"] == 1

    _, group_ids, _ = made["/api/v1/manage/user-groups/"]
    assert _ok(op.get(f"/api/v1/manage/user-groups/{group_ids[0]}/"), 200)["name"] == "grp2"
    _, type_ids, _ = made["/api/v1/manage/message-types/"]
    mtype = _ok(op.get(f"/api/v1/manage/message-types/{type_ids[-1]}/"), 200)
    assert (mtype["code"], mtype["name"], mtype["category"], mtype["self_service"]) == (
        "mt0",
        "Type 0",
        "system",
        False,
    )
    _, bulletin_ids, _ = made["/api/v1/manage/bulletins/"]
    bulletin = _ok(op.get(f"/api/v1/manage/bulletins/{bulletin_ids[0]}/"), 200)
    assert bulletin["user_groups"] == [group]
    assert _is_time(bulletin["display_time"])
    _, sub_ids, _ = made["/api/v1/manage/subscriptions/"]
    sub = _ok(op.get(f"/api/v1/manage/subscriptions/{sub_ids[0]}/"), 200)
    assert (sub["message_type"], sub["scope"], sub["user"], sub["group"]) == ("mt0", "S2", str(recipient.pk), None)
    _, announcement_ids, _ = made["/api/v1/manage/announcements/"]
    announcement = _ok(op.get(f"/api/v1/manage/announcements/{announcement_ids[0]}/"), 200)
    assert (announcement["title"], announcement["platforms"], announcement["pinned"]) == ("an2", ["user"], False)
    assert _is_time(announcement["publish_at"])
    assert _is_time(announcement["expire_at"])

    # A deleted resource is gone from its read-back too.
    _ok(op.delete(f"/api/v1/manage/bulletins/{bulletin_ids[0]}/"), 204)
    assert_error(op.get(f"/api/v1/manage/bulletins/{bulletin_ids[0]}/"), 404)
    _ok(op.delete(f"/api/v1/manage/subscriptions/{sub_ids[0]}/"), 204)
    assert_error(op.get(f"/api/v1/manage/subscriptions/{sub_ids[0]}/"), 404)


def test_group_members_list(operator: Any, recipient: Any, other_recipient: Any, outsider: Any) -> None:
    op = client_for(operator)
    group = _ok(op.post("/api/v1/manage/user-groups/", {"name": "team"}, format="json"), 201)["id"]
    members = f"/api/v1/manage/user-groups/{group}/members/"
    # user_ids: string and integer forms; malformed 400 naming nothing changed.
    assert _ok(op.post(members, {"user_ids": [str(recipient.pk), other_recipient.pk]}, format="json"), 200) == {
        "added": 2
    }
    for bad in (["abc"], [0], [-1], [True], [1.5], "1"):
        assert_error(op.post(members, {"user_ids": bad}, format="json"), 400)
    assert_error(op.post(members, {"user_ids": [outsider.pk, 999999]}, format="json"), 400)
    page = _ok(op.get(members), 200)
    assert set(page) >= {"results", "next_cursor"}
    rows = page["results"]
    assert {(row["id"], row["username"]) for row in rows} == {
        (str(recipient.pk), "alice"),
        (str(other_recipient.pk), "bob"),
    }
    assert all(isinstance(row["id"], str) for row in rows)
    walked = _walk(op, members, 1)
    assert [row["id"] for row in walked] == [row["id"] for row in rows]
    _assert_list_rules(op, members)
    assert _ok(op.get(f"/api/v1/manage/user-groups/{group}/"), 200)["member_count"] == 2
    assert _ok(op.delete(members, {"user_ids": [str(recipient.pk)]}, format="json"), 200) == {"removed": 1}
    assert [row["username"] for row in _ok(op.get(members), 200)["results"]] == ["bob"]
    assert_error(op.get("/api/v1/manage/user-groups/999999999/members/"), 404)
    assert_error(op.get("/api/v1/manage/user-groups/abc/members/"), 400)
    assert_error(client_for(recipient).get(members), 403)


# -- idempotency --------------------------------------------------------------------------


def test_idempotency_key(operator: Any, recipient: Any) -> None:
    op, me = client_for(operator), client_for(recipient)
    body = {
        "category": "system",
        "title": "once",
        "body_html": "x",
        "to": {"users": [recipient.pk]},
        "idempotency_key": "order-42",
    }
    first = _ok(op.post("/api/v1/manage/messages/", body, format="json"), 202)
    again = _ok(op.post("/api/v1/manage/messages/", body, format="json"), 200)
    assert again["id"] == first["id"]
    assert isinstance(again["id"], str)
    assert _titles(me) == ["once"]
    listed = _ok(op.get("/api/v1/manage/messages/"), 200)["results"]
    assert [row["id"] for row in listed] == [first["id"]]
    other = _ok(op.post("/api/v1/manage/messages/", {**body, "idempotency_key": "order-43"}, format="json"), 202)
    assert other["id"] != first["id"]
    assert_error(op.post("/api/v1/manage/messages/", {**body, "idempotency_key": "k" * 201}, format="json"), 400)
    assert_error(op.post("/api/v1/manage/messages/", {**body, "idempotency_key": 7}, format="json"), 400)
    _ok(op.post("/api/v1/manage/messages/", {**body, "idempotency_key": "k" * 200}, format="json"), 202)
    assert len(_titles(me)) == 3


def test_scheduled_sends_and_keys_read_back(operator: Any, recipient: Any) -> None:
    """A scheduled message or notification reads back with its send_at and a
    scheduled status (a notification's recipients stay 0 until it is sent, so
    only the status tells it from a sent one); a message's key reads back."""
    op = client_for(operator)
    send_at = _iso(datetime.now(UTC) + timedelta(days=2))
    later = _send(op, [recipient.pk], "later", send_at=send_at, idempotency_key="batch-9")
    message = _ok(op.get(f"/api/v1/manage/messages/{later['id']}/"), 200)
    assert (message["status"], message["idempotency_key"]) == ("scheduled", "batch-9")
    assert datetime.fromisoformat(message["send_at"]) == datetime.fromisoformat(send_at)
    now = _send(op, [recipient.pk], "now")
    message = _ok(op.get(f"/api/v1/manage/messages/{now['id']}/"), 200)
    assert (message["send_at"], message["idempotency_key"]) == (None, None)
    assert message["status"] != "scheduled"

    _ok(op.post("/api/v1/manage/message-types/", {"code": "dock", "name": "Dock"}), 201)
    _ok(op.post("/api/v1/manage/subscriptions/", {"message_type": "dock", "scope": "D1", "user": recipient.pk}), 201)
    body = {"message_type": "dock", "scope": "D1", "title": "Gate 4", "body_html": "x"}
    scheduled = _ok(op.post("/api/v1/manage/notifications/", {**body, "send_at": send_at}), 202)
    sent = _ok(op.post("/api/v1/manage/notifications/", body), 202)
    note = _ok(op.get(f"/api/v1/manage/notifications/{scheduled['id']}/"), 200)
    assert (note["status"], note["recipients"], note["withdrawn"]) == ("scheduled", 0, False)
    assert datetime.fromisoformat(note["send_at"]) == datetime.fromisoformat(send_at)
    note = _ok(op.get(f"/api/v1/manage/notifications/{sent['id']}/"), 200)
    assert (note["status"], note["recipients"], note["send_at"]) == ("sent", 1, None)
    _ok(op.delete(f"/api/v1/manage/notifications/{sent['id']}/"), 204)
    assert _ok(op.get(f"/api/v1/manage/notifications/{sent['id']}/"), 200)["status"] == "withdrawn"


# -- the id rule --------------------------------------------------------------------------


def test_id_inputs_accept_string_and_integer(operator: Any, recipient: Any, other_recipient: Any) -> None:
    op, me, bob = client_for(operator), client_for(recipient), client_for(other_recipient)
    group = _ok(op.post("/api/v1/manage/user-groups/", {"name": "ids"}, format="json"), 201)["id"]
    _ok(op.post(f"/api/v1/manage/user-groups/{group}/members/", {"user_ids": [recipient.pk]}, format="json"), 200)

    # to.groups / to.users: the string the API returned and the JSON integer.
    for n, to in enumerate(
        ({"groups": [group]}, {"groups": [int(group)]}, {"users": [str(recipient.pk)]}, {"users": [recipient.pk]})
    ):
        body = {"category": "system", "title": f"t{n}", "body_html": "x", "to": to}
        assert _ok(op.post("/api/v1/manage/messages/", body, format="json"), 202)["recipients"] in (1, None)
    assert _titles(me) == ["t3", "t2", "t1", "t0"]
    assert _titles(bob) == []
    for to in ({"groups": ["abc"]}, {"groups": [0]}, {"users": ["x1"]}, {"groups": [1.5]}, {"users": [True]}):
        body = {"category": "system", "title": "bad", "body_html": "x", "to": to}
        assert_error(op.post("/api/v1/manage/messages/", body, format="json"), 400)

    # Bulletins: user_groups both forms; PATCH too.
    for n, groups in enumerate(([group], [int(group)])):
        body = {"title": f"bul{n}", "body_html": "x", "display_time": "2020-01-01T00:00:00Z", "user_groups": groups}
        bulletin = _ok(op.post("/api/v1/manage/bulletins/", body, format="json"), 201)
        assert isinstance(bulletin["id"], str)
    assert "bul1" in _titles(me)
    assert "bul1" not in _titles(bob)
    bad_bulletin = {"title": "b", "body_html": "x", "display_time": "2020-01-01T00:00:00Z", "user_groups": ["g"]}
    assert_error(op.post("/api/v1/manage/bulletins/", bad_bulletin, format="json"), 400)
    patch = op.patch(f"/api/v1/manage/bulletins/{bulletin['id']}/", {"user_groups": [str(group)]}, format="json")
    assert _ok(patch, 200)["user_groups"] == [group]

    # Subscriptions: group and user both forms.
    _ok(op.post("/api/v1/manage/message-types/", {"code": "idt", "name": "Ids"}, format="json"), 201)
    for scope, who in (("A", {"group": group}), ("B", {"group": int(group)}), ("C", {"user": str(other_recipient.pk)})):
        _ok(
            op.post("/api/v1/manage/subscriptions/", {"message_type": "idt", "scope": scope, **who}, format="json"), 201
        )
    _ok(
        op.post("/api/v1/manage/subscriptions/", {"message_type": "idt", "scope": "D", "user": recipient.pk}),
        201,
    )
    for who in ({"group": "abc"}, {"user": "0"}, {"user": 1.5}, {"group": group, "user": recipient.pk}, {}):
        assert_error(
            op.post("/api/v1/manage/subscriptions/", {"message_type": "idt", "scope": "Z", **who}, format="json"), 400
        )

    # Paths: platforms of a user.
    _ok(op.put(f"/api/v1/manage/users/{recipient.pk}/platforms/", {"platforms": ["user"]}, format="json"), 200)
    assert_error(op.put("/api/v1/manage/users/abc/platforms/", {"platforms": ["user"]}, format="json"), 400)

    # Bulk takes the ids exactly as the inbox returned them.
    ids = [item["id"] for item in _inbox(me)["results"]]
    assert _ok(me.post("/api/v1/inbox/bulk/", {"action": "read", "ids": ids}, format="json"), 200) == {"done": len(ids)}
    for bad in ([None], [["x"]], [{"id": 1}]):
        assert_error(me.post("/api/v1/inbox/bulk/", {"action": "read", "ids": bad}, format="json"), 400)


# -- audit ------------------------------------------------------------------------------


def test_audit_lists_operator_writes(operator: Any, recipient: Any) -> None:
    op, me = client_for(operator), client_for(recipient)
    group = _ok(op.post("/api/v1/manage/user-groups/", {"name": "audited"}, format="json"), 201)["id"]
    _ok(op.post(f"/api/v1/manage/user-groups/{group}/members/", {"user_ids": [recipient.pk]}, format="json"), 200)
    announcement = _ok(
        op.post("/api/v1/manage/announcements/", {"title": "A", "body_html": "x", "platforms": ["user"]}), 201
    )["id"]
    _ok(op.patch(f"/api/v1/manage/announcements/{announcement}/", {"title": "B"}, format="json"), 200)
    _ok(op.delete(f"/api/v1/manage/announcements/{announcement}/"), 204)

    audit = "/api/v1/manage/audit/"
    assert_error(me.get(audit), 403)
    page = _ok(op.get(audit), 200)
    assert set(page) >= {"results", "next_cursor"}
    rows = page["results"]
    for row in rows:
        assert set(row) >= {"id", "actor", "action", "object_type", "object_id", "at"}
        assert all(isinstance(row[name], str) for name in ("id", "actor", "action", "object_type", "object_id"))
        assert _is_time(row["at"])
        assert row["actor"] == "olivia-operator"
    # Newest first: the delete, then the update, then the create of the announcement.
    types = {row["object_type"] for row in rows if row["object_id"] == announcement and row["action"] == "delete"}
    (announcement_type,) = types
    about = [r["action"] for r in rows if (r["object_id"], r["object_type"]) == (announcement, announcement_type)]
    assert about == ["delete", "update", "create"], about
    assert [row["id"] for row in _walk(op, audit, 2)] == [row["id"] for row in rows]
    _assert_list_rules(op, audit)


def test_audit_covers_every_operator_write(operator: Any, recipient: Any) -> None:
    op = client_for(operator)
    audit_types: set[str] = set()

    def did(response: Any, status: int, actions: set[str], object_id: str | None = None) -> str:
        """The write succeeded and is the newest audit entry, with its named fields."""
        answer = _ok(response, status)
        key = object_id if object_id is not None else str(answer["id"])
        (newest,) = _ok(op.get("/api/v1/manage/audit/?limit=1"), 200)["results"]
        assert (newest["object_id"], newest["actor"]) == (key, "olivia-operator"), newest
        assert newest["action"] in actions, newest
        assert _is_time(newest["at"])
        audit_types.add(newest["object_type"])
        return key

    group = did(op.post("/api/v1/manage/user-groups/", {"name": "w"}), 201, {"create"})
    members = f"/api/v1/manage/user-groups/{group}/members/"
    did(op.post(members, {"user_ids": [recipient.pk]}), 200, {"members_add"}, group)
    did(op.delete(members, {"user_ids": [recipient.pk]}), 200, {"members_remove"}, group)
    bulletin = did(
        op.post(
            "/api/v1/manage/bulletins/",
            {"title": "b", "body_html": "x", "display_time": "2020-01-01T00:00:00Z", "user_groups": []},
        ),
        201,
        {"create"},
    )
    did(op.patch(f"/api/v1/manage/bulletins/{bulletin}/", {"title": "c"}), 200, {"update"}, bulletin)
    did(op.delete(f"/api/v1/manage/bulletins/{bulletin}/"), 204, {"delete"}, bulletin)
    body = {"category": "system", "title": "m", "body_html": "x", "to": {"users": [recipient.pk]}}
    message = did(op.post("/api/v1/manage/messages/", body), 202, {"create", "send"})
    did(op.delete(f"/api/v1/manage/messages/{message}/"), 204, {"delete", "retract"}, message)
    did(op.post("/api/v1/manage/message-types/", {"code": "aud", "name": "Aud"}), 201, {"create"})
    sub = did(
        op.post("/api/v1/manage/subscriptions/", {"message_type": "aud", "scope": "S", "user": recipient.pk}),
        201,
        {"create"},
    )
    note = {"message_type": "aud", "scope": "S", "title": "n", "body_html": "x"}
    did(op.post("/api/v1/manage/notifications/", note), 202, {"create", "send"})
    did(op.delete(f"/api/v1/manage/subscriptions/{sub}/"), 204, {"delete"}, sub)
    platforms = op.put(f"/api/v1/manage/users/{recipient.pk}/platforms/", {"platforms": ["user", "customer"]})
    did(platforms, 200, {"update", "set_platforms", "platforms_set"}, str(recipient.pk))
    announcement = did(
        op.post("/api/v1/manage/announcements/", {"title": "A", "body_html": "x", "platforms": ["user"]}),
        201,
        {"create", "publish"},
    )
    did(op.patch(f"/api/v1/manage/announcements/{announcement}/", {"pinned": True}), 200, {"update"}, announcement)
    did(op.delete(f"/api/v1/manage/announcements/{announcement}/"), 204, {"delete"}, announcement)
    assert len(audit_types) >= 6, audit_types


def test_read_back_paging_is_stable_while_items_arrive(operator: Any) -> None:
    op = client_for(operator)
    for n in range(5):
        _ok(op.post("/api/v1/manage/message-types/", {"code": f"p{n}", "name": "P"}), 201)
    first = _ok(op.get("/api/v1/manage/message-types/?limit=2"), 200)
    assert [row["code"] for row in first["results"]] == ["p4", "p3"]
    _ok(op.post("/api/v1/manage/message-types/", {"code": "new", "name": "N"}), 201)
    rest = _walk(op, f"/api/v1/manage/message-types/?cursor={quote(first['next_cursor'])}", 2)
    assert [row["code"] for row in rest] == ["p2", "p1", "p0"]
    assert _ok(op.get("/api/v1/manage/message-types/"), 200)["results"][0]["code"] == "new"


# -- error envelope ----------------------------------------------------------------------


def test_errors_are_envelopes(operator: Any, recipient: Any, anon_client: APIClient) -> None:
    op, me = client_for(operator), client_for(recipient)
    for path in ("/api/v1/inbox/", "/api/v1/me/preferences/", "/api/v1/me/subscriptions/", "/api/v1/manage/audit/"):
        assert_error(anon_client.get(path), 401)
    assert_error(anon_client.post("/api/v1/inbox/bulk/", {"action": "read", "ids": ["m1"]}, format="json"), 401)
    assert_error(me.post("/api/v1/inbox/bulk/", data="[1]", content_type="application/json"), 400)
    assert_error(me.post("/api/v1/inbox/bulk/", data="{", content_type="application/json"), 400)
    assert_error(me.put("/api/v1/me/preferences/", data="{", content_type="application/json"), 400)
    assert_error(op.post("/api/v1/manage/message-types/", {"code": "c", "name": "n", "self_service": "yes"}), 400)
    _ok(op.post("/api/v1/manage/message-types/", {"code": "dup", "name": "n"}, format="json"), 201)
    error = assert_error(op.post("/api/v1/manage/message-types/", {"code": "dup", "name": "n"}, format="json"), 400)
    assert isinstance(error["code"], str)
    assert_error(me.get("/api/v1/inbox/?q=" + "x" * 5000), 400)


# -- OpenAPI ---------------------------------------------------------------------------------


V11_OPERATIONS = {
    "/api/v1/inbox/{item_id}/archive/": {"post"},
    "/api/v1/inbox/{item_id}/unarchive/": {"post"},
    "/api/v1/inbox/{item_id}/snooze/": {"post"},
    "/api/v1/inbox/bulk/": {"post"},
    "/api/v1/inbox/": {"get"},
    "/api/v1/inbox/counts/": {"get"},
    "/api/v1/me/preferences/": {"get", "put"},
    "/api/v1/me/subscriptions/": {"get", "post"},
    "/api/v1/me/subscriptions/{subscription_id}/": {"delete"},
    "/api/v1/manage/announcements/": {"get", "post"},
    "/api/v1/manage/announcements/{announcement_id}/": {"get", "patch", "delete"},
    "/api/v1/manage/bulletins/": {"get", "post"},
    "/api/v1/manage/bulletins/{bulletin_id}/": {"get", "patch", "delete"},
    "/api/v1/manage/messages/": {"get", "post"},
    "/api/v1/manage/messages/{message_id}/": {"get", "delete"},
    "/api/v1/manage/user-groups/": {"get", "post"},
    "/api/v1/manage/user-groups/{group_id}/": {"get"},
    "/api/v1/manage/user-groups/{group_id}/members/": {"get", "post", "delete"},
    "/api/v1/manage/message-types/": {"get", "post"},
    "/api/v1/manage/subscriptions/": {"get", "post"},
    "/api/v1/manage/subscriptions/{subscription_id}/": {"get", "delete"},
    "/api/v1/manage/audit/": {"get"},
}


def _schema_path(paths: dict[str, Any], path: str) -> dict[str, Any]:
    """The schema's entry for a path, whatever the path parameter is named."""
    prefix, _, rest = path.partition("{")
    if not rest:
        return dict(paths[path])
    suffix = rest.partition("}")[2]
    (match,) = [
        p
        for p in paths
        if p.startswith(prefix)
        and p.endswith(suffix)
        and p.count("{") == path.count("{")
        and p[len(prefix) :].startswith("{")
        and "/" not in p[len(prefix) : len(p) - len(suffix)]
    ]
    return dict(paths[match])


def test_openapi_lists_v11(operator: Any) -> None:
    schema = _ok(client_for(operator).get("/api/schema/?format=json"), 200)
    paths = schema["paths"]
    for path, methods in V11_OPERATIONS.items():
        entry = _schema_path(paths, path)
        assert methods <= set(entry), (path, set(entry))
    message_type_detail = [p for p in paths if p.startswith("/api/v1/manage/message-types/{")]
    assert any("get" in paths[p] for p in message_type_detail), message_type_detail
    inbox_params = {param["name"] for param in paths["/api/v1/inbox/"]["get"].get("parameters", [])}
    assert {"q", "archived", "category", "unread", "limit", "cursor", "since"} <= inbox_params
    text = str(schema)
    for field in ("total_unread", "idempotency_key", "self_service", "read_count", "muted_message_types"):
        assert field in text, field


def test_pulled_items_archive_snooze_search_and_mute(operator: Any, recipient: Any, other_recipient: Any) -> None:
    """Bulletins, messages to everyone and notifications follow the same v1.1 rules as pushed messages."""
    op, me, bob = client_for(operator), client_for(recipient), client_for(other_recipient)
    bulletin = {
        "title": "Maintenance window",
        "body_html": "x",
        "display_time": "2020-01-01T00:00:00Z",
        "user_groups": [],
    }
    _ok(op.post("/api/v1/manage/bulletins/", bulletin), 201)
    everyone = {"category": "promotion", "title": "Sale for all", "body_html": "x", "to": {"everyone": True}}
    assert _ok(op.post("/api/v1/manage/messages/", everyone), 202)["delivery"] == "pull"
    _ok(op.post("/api/v1/manage/message-types/", {"code": "wh", "name": "Warehouse"}), 201)
    _ok(op.post("/api/v1/manage/subscriptions/", {"message_type": "wh", "scope": "W", "user": recipient.pk}), 201)
    note = {"message_type": "wh", "scope": "W", "title": "Stock low", "body_html": "x"}
    _ok(op.post("/api/v1/manage/notifications/", note), 202)
    items = {item["title"]: item for item in _inbox(me)["results"]}
    assert {items[t]["kind"] for t in items} == {"bulletin", "message", "notification"}
    assert _counts(me)["unread"] == 3

    assert _titles(me, "q=MAINTENANCE") == ["Maintenance window"]
    assert _titles(me, "q=stock") == ["Stock low"]
    for title in ("Maintenance window", "Sale for all"):
        _ok(me.post(f"/api/v1/inbox/{items[title]['id']}/archive/"), 204)
    assert _titles(me) == ["Stock low"]
    assert _counts(me)["unread"] == 1
    assert sorted(_titles(me, "archived=true")) == ["Maintenance window", "Sale for all"]
    # Another user's view of the same pulled items is untouched.
    assert len(_inbox(bob)["results"]) == 2
    bulk = {"action": "unarchive", "ids": [items["Maintenance window"]["id"], items["Sale for all"]["id"]]}
    assert _ok(me.post("/api/v1/inbox/bulk/", bulk), 200) == {"done": 2}
    assert _counts(me)["unread"] == 3

    until = _iso(datetime.now(UTC) + timedelta(hours=2))
    _ok(me.post(f"/api/v1/inbox/{items['Maintenance window']['id']}/snooze/", {"until": until}), 204)
    assert "Maintenance window" not in _titles(me)
    assert _counts(me)["unread"] == 2

    # Muting: pulled items of a muted category that arrive while muted never show or count.
    _ok(me.put("/api/v1/me/preferences/", {"muted_categories": ["system", "promotion"]}), 200)
    shown_now = _iso(datetime.now(UTC))
    _ok(op.post("/api/v1/manage/bulletins/", {**bulletin, "title": "Muted bulletin", "display_time": shown_now}), 201)
    _ok(op.post("/api/v1/manage/messages/", {**everyone, "title": "Muted sale"}), 202)
    titles = _titles(me)
    assert "Muted bulletin" not in titles
    assert "Muted sale" not in titles
    assert _counts(me)["unread"] == 2
    assert {"Muted bulletin", "Muted sale"} <= set(_titles(bob))


def test_backdated_bulletin_created_while_muted_never_shows(operator: Any, recipient: Any) -> None:
    """A bulletin created while "system" is muted arrives while muted, even when its
    display time (the moment it may first show) lies before the mute."""
    op, me = client_for(operator), client_for(recipient)
    _ok(me.put("/api/v1/me/preferences/", {"muted_categories": ["system"]}), 200)
    body = {"title": "Backdated", "body_html": "x", "display_time": "2020-01-01T00:00:00Z", "user_groups": []}
    _ok(op.post("/api/v1/manage/bulletins/", body), 201)
    assert _titles(me) == []
    assert _counts(me)["unread"] == 0


def test_limit_defaults_to_20_and_is_capped_at_100(operator: Any, recipient: Any) -> None:
    op, me = client_for(operator), client_for(recipient)
    for n in range(101):
        _ok(op.post("/api/v1/manage/message-types/", {"code": f"lim{n}", "name": "L"}), 201)
        _send(op, [recipient.pk], f"m{n}")
    for path in (
        "/api/v1/manage/message-types/",
        "/api/v1/manage/messages/",
        "/api/v1/manage/audit/",
        "/api/v1/inbox/",
        "/api/v1/inbox/?q=m",
    ):
        page = _ok(op.get(path) if "manage" in path else me.get(path), 200)
        assert len(page["results"]) == 20, path
        assert isinstance(page["next_cursor"], str), path
        sep = "&" if "?" in path else "?"
        capped = _ok((op if "manage" in path else me).get(f"{path}{sep}limit=1000"), 200)
        assert len(capped["results"]) == 100, path
        assert isinstance(capped["next_cursor"], str), path
    _ok(
        me.post(
            "/api/v1/inbox/bulk/", {"action": "archive", "ids": [i["id"] for i in _inbox(me, "limit=100")["results"]]}
        ),
        200,
    )
    archived = _inbox(me, "archived=true")
    assert len(archived["results"]) == 20
    assert len(_walk(me, "/api/v1/inbox/?archived=true", 100)) == 100
    assert _titles(me) == ["m0"]


def test_openapi_documents_the_400_of_a_malformed_path_id(operator: Any) -> None:
    paths = _ok(client_for(operator).get("/api/schema/?format=json"), 200)["paths"]
    checked = 0
    for path, entry in paths.items():
        for method, operation in entry.items():
            params = (
                [p for p in operation.get("parameters", []) if p["in"] == "path"] if isinstance(operation, dict) else []
            )
            if any(p["schema"].get("pattern") for p in params):
                assert "400" in operation["responses"], (method, path)
                checked += 1
    assert checked >= 20, checked
