"""One walk through the REST contract as a client sees it: operators
create groups, messages, bulletins, announcements and notifications; a
recipient reads them; an outsider gets 404; bad input gets the envelope."""

from typing import Any

import pytest

from tests.conftest import assert_error, client_for

pytestmark = pytest.mark.django_db(transaction=True)


def _ok(response: Any, status: int) -> Any:
    assert response.status_code == status, response.content
    return response.json() if response.content else None


def test_contract_walkthrough(operator: Any, recipient: Any, outsider: Any) -> None:
    op, me, out = client_for(operator), client_for(recipient), client_for(outsider)

    # Groups: ids are strings, duplicates and unknown members are 400.
    group_id = _ok(op.post("/api/v1/manage/user-groups/", {"name": "g1"}, format="json"), 201)["id"]
    assert isinstance(group_id, str)
    assert_error(op.post("/api/v1/manage/user-groups/", {"name": "g1"}, format="json"), 400)
    members = f"/api/v1/manage/user-groups/{group_id}/members/"
    error = assert_error(op.post(members, {"user_ids": [recipient.pk, 999999]}, format="json"), 400)
    assert "999999" in str(error)
    assert _ok(op.post(members, {"user_ids": [recipient.pk]}, format="json"), 200) == {"added": 1}
    assert_error(me.post("/api/v1/manage/user-groups/", {"name": "x"}, format="json"), 403)

    # A pushed message reaches the member only; its body is sanitised.
    sent = _ok(
        op.post(
            "/api/v1/manage/messages/",
            {
                "category": "promotion",
                "title": "T",
                "body_html": "<p>b<script>x</script></p>",
                "to": {"groups": [int(group_id)]},
            },
            format="json",
        ),
        202,
    )
    assert sent["delivery"] in {"push", "pull"}
    assert sent["recipients"] == 1
    (item,) = _ok(me.get("/api/v1/inbox/"), 200)["results"]
    assert set(item) >= {"id", "kind", "category", "title", "summary", "created_at", "read"}
    assert item["kind"] == "message"
    assert item["created_at"].endswith("+00:00")
    detail = _ok(me.get(f"/api/v1/inbox/{item['id']}/"), 200)
    assert "script" not in detail["body_html"]
    assert (detail["images"], detail["link"], detail["read"]) == ([], None, False)
    assert_error(out.get(f"/api/v1/inbox/{item['id']}/"), 404)
    assert_error(out.post(f"/api/v1/inbox/{item['id']}/read/"), 404)

    # Read state, counts, read-all, seen.
    _ok(me.post(f"/api/v1/inbox/{item['id']}/read/"), 204)
    counts = _ok(me.get("/api/v1/inbox/counts/"), 200)
    assert counts["unread"] == 0
    assert set(counts["by_category"]) == {"system", "promotion", "transaction", "interaction", "announcement"}
    _ok(me.post(f"/api/v1/inbox/{item['id']}/unread/"), 204)
    assert _ok(me.post("/api/v1/inbox/read-all/", {"category": "promotion"}, format="json"), 200) == {"marked": 1}
    _ok(me.post("/api/v1/inbox/seen/"), 204)
    assert _ok(me.get("/api/v1/inbox/"), 200)["unseen_count"] == 0
    assert_error(me.post("/api/v1/inbox/read-all/", data="[1]", content_type="application/json"), 400)

    # Bad query parameters are 400 envelopes; a large limit is capped.
    for query in ("limit=0", "limit=abc", "cursor=garbage", "category=bogus", "unread=maybe", "since=yesterday"):
        assert_error(me.get(f"/api/v1/inbox/?{query}"), 400)
    _ok(me.get("/api/v1/inbox/?limit=1000"), 200)

    # Hiding removes the item from this user's inbox.
    _ok(me.delete(f"/api/v1/inbox/{item['id']}/"), 204)
    assert _ok(me.get("/api/v1/inbox/"), 200)["results"] == []

    # Announcements: counts, read marks, stats.
    created = op.post(
        "/api/v1/manage/announcements/", {"title": "A", "body_html": "<p>x</p>", "platforms": ["user"]}, format="json"
    )
    announcement_id = _ok(created, 201)["id"]
    assert _ok(me.get("/api/v1/announcements/counts/"), 200) == {"read": 0, "unread": 1}
    assert _ok(me.get(f"/api/v1/announcements/{announcement_id}/"), 200)["read"] is False
    _ok(me.post(f"/api/v1/announcements/{announcement_id}/read/"), 204)
    stats = _ok(op.get(f"/api/v1/manage/announcements/{announcement_id}/stats/"), 200)
    assert stats["read_total"] == 1
    assert stats["by_platform"]["user"]["read"] == 1

    # Bulletins merge into the inbox and leave it when deleted.
    bulletin = op.post(
        "/api/v1/manage/bulletins/",
        {"title": "B", "body_html": "x", "display_time": "2020-01-01T00:00:00Z", "user_groups": []},
        format="json",
    )
    bulletin_id = _ok(bulletin, 201)["id"]
    assert _ok(me.get("/api/v1/inbox/"), 200)["results"][0]["kind"] == "bulletin"
    _ok(op.delete(f"/api/v1/manage/bulletins/{bulletin_id}/"), 204)
    assert _ok(me.get("/api/v1/inbox/"), 200)["results"] == []

    # "Everyone" is pulled; retraction removes it from every inbox.
    everyone = op.post(
        "/api/v1/manage/messages/",
        {"category": "system", "title": "E", "body_html": "x", "to": {"everyone": True}},
        format="json",
    )
    message = _ok(everyone, 202)
    assert message["delivery"] == "pull"
    assert len(_ok(out.get("/api/v1/inbox/"), 200)["results"]) == 1
    _ok(op.delete(f"/api/v1/manage/messages/{message['id']}/"), 204)
    assert _ok(out.get("/api/v1/inbox/"), 200)["results"] == []

    # Subscriptions: a notification reaches the subscriber as kind "notification".
    _ok(op.post("/api/v1/manage/message-types/", {"code": "rep", "name": "Replenish"}, format="json"), 201)
    subscription = {"message_type": "rep", "scope": "WH1", "user": recipient.pk}
    _ok(op.post("/api/v1/manage/subscriptions/", subscription, format="json"), 201)
    notification = {"message_type": "rep", "scope": "WH1", "title": "N", "body_html": "x", "ttl_seconds": 60}
    assert _ok(op.post("/api/v1/manage/notifications/", notification, format="json"), 202)["recipients"] == 1
    assert _ok(me.get("/api/v1/inbox/"), 200)["results"][0]["kind"] == "notification"
    assert _ok(out.get("/api/v1/inbox/"), 200)["results"] == []
