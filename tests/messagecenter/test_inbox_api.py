"""The signed-in user's inbox over REST, hot path without SQL."""

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import given, settings
from hypothesis import strategies as st

from messagecenter import keys as mc_keys
from messagecenter.apis.inbox import KINDS, InboxListApi, page_payload
from messagecenter.models import CATEGORIES, InboxHidden
from messagecenter.selectors import InboxItem, InboxPage
from tests.conftest import assert_error, client_for
from tests.messagecenter.conftest import ids, send

pytestmark = pytest.mark.django_db(transaction=True)


def test_anonymous_gets_401(anon_client: Any) -> None:
    for path in ("/api/v1/inbox/", "/api/v1/inbox/counts/", "/api/v1/inbox/m1/"):
        assert_error(anon_client.get(path), 401)
    assert_error(anon_client.post("/api/v1/inbox/read-all/"), 401)


def test_item_shape_and_detail(operator: Any, recipient: Any, clock: Any) -> None:
    message = send(
        operator,
        to={"users": [recipient]},
        category="promotion",
        title="Sale",
        summary="Half price",
        body_html='<p>Now <script>alert(1)</script><img src="https://x.test/a.png" onerror="x()"></p>',
        link="https://shop.test/sale",
        images=["https://cdn.test/1.png", "https://cdn.test/2.png"],
    )
    client = client_for(recipient)
    item = client.get("/api/v1/inbox/").json()["results"][0]
    assert item == {
        "id": f"m{message.pk}",
        "kind": "message",
        "category": "promotion",
        "title": "Sale",
        "summary": "Half price",
        "created_at": "2026-11-22T10:00:00+00:00",
        "read": False,
        "sender": "olivia-operator",
        "actions": [],
        "response": None,
        "group": None,
    }
    detail = client.get(f"/api/v1/inbox/m{message.pk}/").json()
    assert detail["images"] == ["https://cdn.test/1.png", "https://cdn.test/2.png"]
    assert detail["link"] == "https://shop.test/sale"
    assert "<script" not in detail["body_html"]
    assert "onerror" not in detail["body_html"]
    # GET never changes state: the detail did not mark it read.
    assert client.get("/api/v1/inbox/counts/").json()["unread"] == 1


def test_read_unread_and_counts(operator: Any, recipient: Any, clock: Any) -> None:
    m1 = send(operator, to={"users": [recipient]}, category="system")
    clock.advance(seconds=1)
    m2 = send(operator, to={"users": [recipient]}, category="promotion")
    client = client_for(recipient)
    counts = client.get("/api/v1/inbox/counts/").json()
    assert counts["unread"] == 2
    assert counts["by_category"] == {
        "system": 1,
        "promotion": 1,
        "transaction": 0,
        "interaction": 0,
        "announcement": 0,
    }
    assert client.post(f"/api/v1/inbox/m{m1.pk}/read/").status_code == 204
    assert client.post(f"/api/v1/inbox/m{m1.pk}/read/").status_code == 204  # idempotent
    body = client.get("/api/v1/inbox/").json()
    assert [(i["id"], i["read"]) for i in body["results"]] == [(f"m{m2.pk}", False), (f"m{m1.pk}", True)]
    assert body["unread_count"] == 1
    assert client.post(f"/api/v1/inbox/m{m1.pk}/unread/").status_code == 204
    assert client.get("/api/v1/inbox/counts/").json()["by_category"]["system"] == 1
    unread = client.get("/api/v1/inbox/?unread=true&category=system").json()
    assert [i["id"] for i in unread["results"]] == [f"m{m1.pk}"]


def test_read_all_and_by_category(operator: Any, recipient: Any, clock: Any) -> None:
    send(operator, to={"users": [recipient]}, category="system")
    send(operator, to={"users": [recipient]}, category="promotion")
    send(operator, to={"users": [recipient]}, category="promotion")
    client = client_for(recipient)
    response = client.post("/api/v1/inbox/read-all/", {"category": "promotion"}, format="json")
    assert response.status_code == 200
    assert response.json() == {"marked": 2}
    assert client.get("/api/v1/inbox/counts/").json()["unread"] == 1
    assert client.post("/api/v1/inbox/read-all/").json() == {"marked": 1}
    assert client.post("/api/v1/inbox/read-all/").json() == {"marked": 0}
    assert client.get("/api/v1/inbox/?unread=true").json()["results"] == []
    assert_error(client.post("/api/v1/inbox/read-all/", {"category": "nope"}, format="json"), 400)


def test_seen_watermark(operator: Any, recipient: Any, clock: Any) -> None:
    send(operator, to={"users": [recipient]})
    client = client_for(recipient)
    assert client.get("/api/v1/inbox/counts/").json()["unseen"] == 1
    assert client.post("/api/v1/inbox/seen/").status_code == 204
    assert client.get("/api/v1/inbox/").json()["unseen_count"] == 0
    clock.advance(seconds=5)
    send(operator, to={"users": [recipient]})
    counts = client.get("/api/v1/inbox/counts/").json()
    assert counts["unseen"] == 1
    assert counts["unread"] == 2


def test_hide_only_for_this_user(operator: Any, recipient: Any, other_recipient: Any, clock: Any) -> None:
    message = send(operator, to={"users": [recipient, other_recipient]})
    client = client_for(recipient)
    assert client.delete(f"/api/v1/inbox/m{message.pk}/").status_code == 204
    assert InboxHidden.objects.filter(user=recipient, item_id=f"m{message.pk}").exists()
    assert client.get("/api/v1/inbox/").json()["results"] == []
    assert client.get("/api/v1/inbox/counts/").json()["unread"] == 0
    assert_error(client.get(f"/api/v1/inbox/m{message.pk}/"), 404, "not_found")
    assert_error(client.delete(f"/api/v1/inbox/m{message.pk}/"), 404)
    assert ids(client_for(other_recipient).get("/api/v1/inbox/")) == [f"m{message.pk}"]


def test_privacy_outsider_gets_404_everywhere(operator: Any, recipient: Any, outsider: Any, clock: Any) -> None:
    message = send(operator, to={"users": [recipient]})
    client = client_for(outsider)
    ref = f"m{message.pk}"
    for response in (
        client.get(f"/api/v1/inbox/{ref}/"),
        client.post(f"/api/v1/inbox/{ref}/read/"),
        client.post(f"/api/v1/inbox/{ref}/unread/"),
        client.delete(f"/api/v1/inbox/{ref}/"),
        client.get("/api/v1/inbox/m999999/"),
        client.get("/api/v1/inbox/garbage|x/"),
    ):
        assert_error(response, 404, "not_found")
    assert client.get("/api/v1/inbox/").json()["results"] == []
    assert client.post("/api/v1/inbox/read-all/").json() == {"marked": 0}
    # The outsider's attempts left the recipient's state alone.
    assert client_for(recipient).get("/api/v1/inbox/counts/").json()["unread"] == 1


def test_paging_never_repeats_or_skips_while_items_arrive(operator: Any, recipient: Any, clock: Any) -> None:
    sent = []
    for i in range(7):
        # Two items per timestamp: ties are paged by offset within the score.
        if i % 2 == 0:
            clock.advance(seconds=1)
        sent.append(f"m{send(operator, to={'users': [recipient]}, title=f't{i}').pk}")
    client = client_for(recipient)
    first = client.get("/api/v1/inbox/?limit=3").json()
    seen = [i["id"] for i in first["results"]]
    cursor = first["next_cursor"]
    assert cursor
    while cursor:
        clock.advance(seconds=1)
        send(operator, to={"users": [recipient]}, title="newer")  # arrives between pages
        page = client.get("/api/v1/inbox/", {"limit": 3, "cursor": cursor}).json()
        seen += [i["id"] for i in page["results"]]
        cursor = page["next_cursor"]
    assert len(seen) == len(set(seen))
    assert set(seen) == set(sent)
    # Newest first: scores never increase along the walk.
    order = {ref: i for i, ref in enumerate(sent)}
    times = [order[ref] // 2 for ref in seen]
    assert times == sorted(times, reverse=True)


def test_paging_with_equal_scores_and_filters(operator: Any, recipient: Any, clock: Any) -> None:
    refs = {f"m{send(operator, to={'users': [recipient]}, category='transaction').pk}" for _ in range(5)}
    client = client_for(recipient)
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, "category": "transaction", "unread": "true"}
        if cursor:
            params["cursor"] = cursor
        page = client.get("/api/v1/inbox/", params).json()
        seen += [i["id"] for i in page["results"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert sorted(seen) == sorted(refs)
    assert len(seen) == 5
    # A cursor belongs to its listing.
    page = client.get("/api/v1/inbox/", {"limit": 2}).json()
    assert_error(client.get("/api/v1/inbox/", {"limit": 2, "cursor": page["next_cursor"], "category": "system"}), 400)


def test_since_polling(operator: Any, recipient: Any, clock: Any) -> None:
    send(operator, to={"users": [recipient]}, title="old")
    since = clock.now.isoformat()
    clock.advance(seconds=2)
    new = send(operator, to={"users": [recipient]}, title="new")
    response = client_for(recipient).get("/api/v1/inbox/", {"since": since})
    assert ids(response) == [f"m{new.pk}"]
    assert response.json()["unread_count"] == 2  # counts cover the whole inbox


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("limit=0", "invalid_limit"),
        ("limit=-3", "invalid_limit"),
        ("limit=abc", "invalid_limit"),
        ("cursor=forged", "invalid_cursor"),
        ("category=spam", "invalid_category"),
        ("unread=maybe", None),
        ("since=yesterday", "invalid_time"),
    ],
)
def test_bad_inputs_give_the_envelope(recipient: Any, query: str, code: str | None) -> None:
    assert_error(client_for(recipient).get(f"/api/v1/inbox/?{query}"), 400, code)


def test_limit_is_capped(operator: Any, recipient: Any, clock: Any, settings: Any) -> None:
    settings.MESSAGECENTER_MAX_PAGE_SIZE = 2
    for _ in range(3):
        send(operator, to={"users": [recipient]})
    body = client_for(recipient).get("/api/v1/inbox/?limit=1000").json()
    assert len(body["results"]) == 2
    assert body["next_cursor"]


def test_hot_path_runs_no_sql_beyond_auth(operator: Any, recipient: Any, clock: Any) -> None:
    from tests.messagecenter.conftest import make_group

    group = make_group("vip", recipient)
    send(operator, to={"groups": [group]})
    send(operator, to={"everyone": True})
    from messagecenter.services import bulletin_create

    bulletin_create(title="B", body_html="b", display_time=clock.now, group_ids=[group.pk])
    client = client_for(recipient)
    client.get("/api/v1/inbox/counts/")  # warms caches other apps keep (platforms)
    client.get("/api/v1/inbox/", {"limit": "1", "category": "promotion"})  # and the reader's language entry
    with CaptureQueriesContext(connection) as captured:
        page = client.get("/api/v1/inbox/")
        counts = client.get("/api/v1/inbox/counts/")
        # Query parameters as the test client encodes them (ints included).
        older = client.get("/api/v1/inbox/", {"limit": 1, "category": "system"})  # type: ignore[arg-type]
        client.get("/api/v1/inbox/", {"cursor": older.json()["next_cursor"], "limit": 1, "category": "system"})
    assert page.status_code == 200
    assert counts.status_code == 200
    assert len(page.json()["results"]) == 3
    sql = [q["sql"] for q in captured.captured_queries]
    # Only authentication may query (token -> user); nothing of the message centre.
    assert all("messagecenter" not in s for s in sql), sql
    assert all(("core_apitoken" in s or "auth_user" in s) for s in sql), sql
    assert len(sql) <= 4  # one per request at most


def test_hot_path_query_budget(django_assert_max_num_queries: Any, operator: Any, recipient: Any, clock: Any) -> None:
    send(operator, to={"users": [recipient]})
    client = client_for(recipient)
    client.get("/api/v1/inbox/counts/")
    with django_assert_max_num_queries(2):  # one auth query per request at most
        client.get("/api/v1/inbox/")
        client.get("/api/v1/inbox/counts/")


def test_all_user_keys_share_one_slot(recipient: Any) -> None:
    from redis.crc import key_slot

    from messagecenter.readmodel.global_ops import GLOBAL_OPS
    from messagecenter.readmodel.scripts import ReadAllOp, inbox_call

    op = ReadAllOp(category="", time_max=None, hour=0)
    slots = {key_slot(k.encode()) for k in inbox_call(op, user_id=recipient.pk, now_ms=0, months=["202611"]).keys}
    slots.add(key_slot(mc_keys.user_groups(recipient.pk).encode()))
    assert len(slots) == 1
    assert len({key_slot(k.encode()) for op in GLOBAL_OPS for k in op.keys()}) == 1


_texts = st.text(max_size=30)
_zones = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=8))])


@settings(max_examples=200, deadline=None)
@given(
    items=st.lists(
        st.builds(
            InboxItem,
            id=st.from_regex(r"[mbn][0-9]{1,6}", fullmatch=True),
            kind=st.sampled_from(KINDS),
            category=st.sampled_from(CATEGORIES),
            title=_texts,
            summary=_texts,
            created_at=st.datetimes(
                min_value=datetime(1971, 1, 1),
                max_value=datetime(2100, 1, 1),
                timezones=st.sampled_from(
                    [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=8))]
                ),
            ),
            read=st.booleans(),
            body_html=_texts,
            images=st.lists(_texts, max_size=2),
            link=st.none() | _texts,
            sender=st.none() | _texts,
        ),
        max_size=5,
    ),
    next_cursor=st.none() | _texts,
    unread=st.integers(0, 10**9),
    unseen=st.integers(0, 10**9),
)
def test_the_list_payload_is_what_the_documented_serializer_gives(
    items: list[InboxItem], next_cursor: str | None, unread: int, unseen: int
) -> None:
    """The list endpoint builds its JSON without DRF's serializer (hot path);
    the serializer documents it in the schema, so the two must agree exactly."""
    page = InboxPage(results=items, next_cursor=next_cursor, unread_count=unread, unseen_count=unseen)
    expected = json.loads(json.dumps(InboxListApi.OutputSerializer(page).data))
    assert json.loads(json.dumps(page_payload(page))) == expected
    assert list(page_payload(page)) == list(expected)
