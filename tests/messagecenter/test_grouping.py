"""Grouped items over REST: one row per unread group, its count and actors,
the row acting for the whole group, the key's list and bad inputs."""

from typing import Any

import pytest

from messagecenter import keys as mc_keys
from messagecenter.models import InboxHidden, Message
from tests.conftest import assert_error, client_for
from tests.messagecenter.conftest import ids, send

pytestmark = pytest.mark.django_db

MESSAGES = "/api/v1/manage/messages/"


def _post(client: Any, user: Any, title: str, **extra: Any) -> str:
    body = {"category": "interaction", "title": title, "body_html": "<p>x</p>", "to": {"users": [user.pk]}, **extra}
    response = client.post(MESSAGES, body, format="json")
    assert response.status_code == 202, response.content
    return f"m{response.json()['id']}"


def _grouped(operator: Any, recipient: Any, clock: Any, actors: list[str], key: str = "order:42") -> list[str]:
    refs = []
    for actor in actors:
        clock.advance(seconds=1)
        title = f"{actor} commented"
        message = send(
            operator, to={"users": [recipient]}, category="interaction", title=title, group_key=key, actor=actor
        )
        refs.append(f"m{message.pk}")
    return refs


def test_fields_are_stored_and_read_back(operator_client: Any, recipient: Any, clock: Any) -> None:
    ref = _post(operator_client, recipient, "Ann commented", group_key="order:42", actor="Ann")
    message = Message.objects.get(pk=ref[1:])
    assert (message.group_key, message.actor) == ("order:42", "Ann")
    detail = operator_client.get(f"{MESSAGES}{ref[1:]}/").json()
    assert (detail["group_key"], detail["actor"]) == ("order:42", "Ann")
    plain = _post(operator_client, recipient, "Plain")
    detail = operator_client.get(f"{MESSAGES}{plain[1:]}/").json()
    assert (detail["group_key"], detail["actor"]) == (None, None)


@pytest.mark.parametrize(
    "extra",
    [
        {"group_key": "k" * 101},
        {"actor": "a" * 101},
        {"group_key": 42},
        {"actor": ["Ann"]},
        {"group_key": None},
    ],
)
def test_bad_inputs_are_400_and_store_nothing(operator_client: Any, recipient: Any, extra: dict[str, Any]) -> None:
    body = {"category": "system", "title": "T", "body_html": "", "to": {"users": [recipient.pk]}, **extra}
    assert_error(operator_client.post(MESSAGES, body, format="json"), 400)
    assert not Message.objects.exists()


def test_limits_are_inclusive(operator_client: Any, recipient: Any) -> None:
    _post(operator_client, recipient, "T", group_key="k" * 100, actor="a" * 100)


def test_items_of_one_key_share_a_row(operator: Any, recipient: Any, clock: Any) -> None:
    refs = _grouped(operator, recipient, clock, ["Ann", "Ben", "Cat"])
    clock.advance(seconds=1)
    plain = send(operator, to={"users": [recipient]}, title="Plain")
    client = client_for(recipient)
    page = client.get("/api/v1/inbox/").json()
    assert ids_of(page) == [f"m{plain.pk}", refs[-1]]
    row = page["results"][1]
    assert row["group"] == {"key": "order:42", "count": 3, "actors": ["Cat", "Ben", "Ann"]}
    assert row["created_at"] == "2026-11-22T10:00:03+00:00"  # the newest item's time
    assert page["results"][0]["group"] is None
    assert page["unread_count"] == 2  # rows, not items
    counts = client.get("/api/v1/inbox/counts/").json()
    assert (counts["unread"], counts["by_category"]["interaction"], counts["by_category"]["system"]) == (2, 1, 1)


def ids_of(page: dict[str, Any]) -> list[str]:
    return [item["id"] for item in page["results"]]


def test_actors_are_distinct_newest_first_and_capped(operator: Any, recipient: Any, clock: Any) -> None:
    _grouped(operator, recipient, clock, ["Ann", "Ben", "Ann", "Cat", "Dan", "Cat"])
    row = client_for(recipient).get("/api/v1/inbox/").json()["results"][0]
    assert row["group"] == {"key": "order:42", "count": 6, "actors": ["Cat", "Dan", "Ann"]}


def test_keys_group_apart_and_per_user(operator: Any, recipient: Any, other_recipient: Any, clock: Any) -> None:
    a = _grouped(operator, recipient, clock, ["Ann", "Ben"], key="order:1")
    b = _grouped(operator, recipient, clock, ["Cat"], key="order:2")
    clock.advance(seconds=1)
    both = send(operator, to={"users": [recipient, other_recipient]}, title="t", group_key="order:1", actor="Dan")
    rows = client_for(recipient).get("/api/v1/inbox/").json()["results"]
    assert [(r["id"], r["group"]["count"]) for r in rows] == [(f"m{both.pk}", 3), (b[0], 1)]
    assert a[0] not in [r["id"] for r in rows]
    other = client_for(other_recipient).get("/api/v1/inbox/").json()["results"]
    assert [(r["id"], r["group"]["count"], r["group"]["actors"]) for r in other] == [(f"m{both.pk}", 1, ["Dan"])]


def test_reading_the_row_reads_the_group_and_the_next_item_starts_a_new_one(
    operator: Any, recipient: Any, clock: Any
) -> None:
    refs = _grouped(operator, recipient, clock, ["Ann", "Ben"])
    client = client_for(recipient)
    assert client.post(f"/api/v1/inbox/{refs[-1]}/read/").status_code == 204
    assert client.get("/api/v1/inbox/counts/").json()["unread"] == 0
    later = _grouped(operator, recipient, clock, ["Cat", "Dan"])
    rows = client.get("/api/v1/inbox/").json()["results"]
    assert [(r["id"], r["read"], r["group"]["count"], r["group"]["actors"]) for r in rows] == [
        (later[-1], False, 2, ["Dan", "Cat"]),
        (refs[-1], True, 2, ["Ben", "Ann"]),
    ]
    assert client.get("/api/v1/inbox/counts/").json()["unread"] == 1


def test_read_all_ends_every_group(operator: Any, recipient: Any, clock: Any) -> None:
    refs = _grouped(operator, recipient, clock, ["Ann", "Ben"])
    client = client_for(recipient)
    assert client.post("/api/v1/inbox/read-all/").status_code in (200, 204)
    later = _grouped(operator, recipient, clock, ["Cat"])
    rows = client.get("/api/v1/inbox/").json()["results"]
    assert [(r["id"], r["group"]["count"]) for r in rows] == [(later[0], 1), (refs[-1], 2)]


def test_archiving_the_row_archives_the_group(operator: Any, recipient: Any, clock: Any) -> None:
    refs = _grouped(operator, recipient, clock, ["Ann", "Ben", "Cat"])
    client = client_for(recipient)
    assert client.post(f"/api/v1/inbox/{refs[-1]}/archive/").status_code in (200, 204)
    assert client.get("/api/v1/inbox/").json()["results"] == []
    assert client.get("/api/v1/inbox/counts/").json()["unread"] == 0
    later = _grouped(operator, recipient, clock, ["Dan"])
    rows = client.get("/api/v1/inbox/").json()["results"]
    assert [(r["id"], r["group"]["count"]) for r in rows] == [(later[0], 1)]


def test_deleting_the_row_deletes_the_group(operator: Any, recipient: Any, clock: Any, redis: Any) -> None:
    refs = _grouped(operator, recipient, clock, ["Ann", "Ben", "Cat"])
    client = client_for(recipient)
    assert client.delete(f"/api/v1/inbox/{refs[-1]}/").status_code == 204
    assert client.get("/api/v1/inbox/").json()["results"] == []
    assert set(InboxHidden.objects.filter(user=recipient).values_list("item_id", flat=True)) == set(refs)
    assert client.get("/api/v1/inbox/?group_key=order:42").json()["results"] == []
    later = _grouped(operator, recipient, clock, ["Dan"])
    rows = client.get("/api/v1/inbox/").json()["results"]
    assert [(r["id"], r["group"]["count"]) for r in rows] == [(later[0], 1)]
    assert redis.hget(mc_keys.inbox_groups_open(recipient.pk), "order:42").decode().startswith(later[0] + "|")


def test_group_key_lists_the_items_newest_first_paged(operator: Any, recipient: Any, clock: Any) -> None:
    refs = _grouped(operator, recipient, clock, ["Ann", "Ben", "Cat"])
    _grouped(operator, recipient, clock, ["Dan"], key="other")
    client = client_for(recipient)
    page = client.get("/api/v1/inbox/?group_key=order:42").json()
    assert ids(_Resp(page)) == refs[::-1]
    assert all(item["read"] is False and item["group"] is None for item in page["results"])
    assert page["unread_count"] == 2
    first = client.get("/api/v1/inbox/?group_key=order:42&limit=2").json()
    assert ids(_Resp(first)) == [refs[2], refs[1]]
    rest = client.get(f"/api/v1/inbox/?group_key=order:42&limit=2&cursor={first['next_cursor']}").json()
    assert (ids(_Resp(rest)), rest["next_cursor"]) == ([refs[0]], None)
    assert client.get("/api/v1/inbox/?group_key=nothing").json()["results"] == []
    assert_error(client.get("/api/v1/inbox/?group_key=" + "k" * 101), 400)
    assert_error(client.get(f"/api/v1/inbox/?group_key=other&cursor={first['next_cursor']}"), 400)
    # Read: the group's items read too.
    client.post(f"/api/v1/inbox/{refs[-1]}/read/")
    page = client.get("/api/v1/inbox/?group_key=order:42").json()
    assert [item["read"] for item in page["results"]] == [True, True, True]


class _Resp:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    def json(self) -> dict[str, Any]:
        return self.body


def test_notifications_group_too(operator_client: Any, recipient: Any, clock: Any) -> None:
    operator_client.post("/api/v1/manage/message-types/", {"code": "review", "name": "Review"}, format="json")
    sub = {"message_type": "review", "scope": "doc:1", "user": recipient.pk}
    assert operator_client.post("/api/v1/manage/subscriptions/", sub, format="json").status_code == 201
    sent = []
    for actor in ("Ann", "Ben"):
        clock.advance(seconds=1)
        body = {"message_type": "review", "scope": "doc:1", "title": "Commented", "body_html": "", "group_key": "doc:1"}
        response = operator_client.post("/api/v1/manage/notifications/", {**body, "actor": actor}, format="json")
        assert response.status_code == 202, response.content
        sent.append(response.json()["id"])
    detail = operator_client.get(f"/api/v1/manage/notifications/{sent[0]}/").json()
    assert (detail["group_key"], detail["actor"]) == ("doc:1", "Ann")
    rows = client_for(recipient).get("/api/v1/inbox/").json()["results"]
    assert [(r["id"], r["group"]) for r in rows] == [
        (f"n{sent[1]}", {"key": "doc:1", "count": 2, "actors": ["Ben", "Ann"]})
    ]
    bad = {"message_type": "review", "scope": "doc:1", "title": "T", "body_html": "", "group_key": "x" * 101}
    assert_error(operator_client.post("/api/v1/manage/notifications/", bad, format="json"), 400)
    assert_error(operator_client.post("/api/v1/manage/notifications/", {**bad, "group_key": 5}, format="json"), 400)


def test_openapi_describes_the_fields(operator_client: Any) -> None:
    schema = operator_client.get("/api/schema/", {"format": "json"}).json()
    item = schema["components"]["schemas"]["Item"]["properties"]
    assert "group" in item
    params = [p["name"] for p in schema["paths"]["/api/v1/inbox/"]["get"]["parameters"]]
    assert "group_key" in params


def test_broadcasts_merged_on_read_group_the_same_way(
    operator: Any, recipient: Any, other_recipient: Any, clock: Any
) -> None:
    client = client_for(recipient)
    clock.advance(seconds=1)
    first = send(operator, to={"everyone": True}, category="interaction", title="a", group_key="news", actor="Ann")
    assert ids(client.get("/api/v1/inbox/")) == [f"m{first.pk}"]  # merged at this read
    refs = []
    for actor in ("Ben", "Cat"):
        clock.advance(seconds=1)
        refs.append(
            send(operator, to={"everyone": True}, category="interaction", title="b", group_key="news", actor=actor).pk
        )
    # Both merge at the next read, after the first was listed: one row.
    page = client.get("/api/v1/inbox/").json()
    assert [(r["id"], r["group"]) for r in page["results"]] == [
        (f"m{refs[-1]}", {"key": "news", "count": 3, "actors": ["Cat", "Ben", "Ann"]})
    ]
    assert page["unread_count"] == 1
    assert client.get("/api/v1/inbox/counts/").json()["unread"] == 1
    # A push of the key joins the broadcast's group too.
    clock.advance(seconds=1)
    pushed = send(operator, to={"users": [recipient]}, category="interaction", title="c", group_key="news", actor="Dan")
    rows = client.get("/api/v1/inbox/").json()["results"]
    assert [(r["id"], r["group"]["count"]) for r in rows] == [(f"m{pushed.pk}", 4)]
    # Another user, reading for the first time, gets the broadcasts in one group.
    other = client_for(other_recipient).get("/api/v1/inbox/").json()["results"]
    assert [(r["id"], r["group"]["count"], r["group"]["actors"]) for r in other] == [
        (f"m{refs[-1]}", 3, ["Cat", "Ben", "Ann"])
    ]
    assert [i["id"] for i in client.get("/api/v1/inbox/?group_key=news").json()["results"]] == [
        f"m{pushed.pk}",
        f"m{refs[1]}",
        f"m{refs[0]}",
        f"m{first.pk}",
    ]


def test_bulk_actions_act_for_the_whole_group(operator: Any, recipient: Any, clock: Any) -> None:
    a = _grouped(operator, recipient, clock, ["Ann", "Ben"], key="a")
    b = _grouped(operator, recipient, clock, ["Cat", "Dan"], key="b")
    client = client_for(recipient)
    assert client.post("/api/v1/inbox/bulk/", {"action": "read", "ids": [a[-1]]}, format="json").status_code == 200
    assert client.post("/api/v1/inbox/bulk/", {"action": "delete", "ids": [b[-1]]}, format="json").status_code == 200
    assert set(InboxHidden.objects.filter(user=recipient).values_list("item_id", flat=True)) == set(b)
    later = _grouped(operator, recipient, clock, ["Eve"], key="a")
    rows = client.get("/api/v1/inbox/").json()["results"]
    assert [(r["id"], r["read"], r["group"]["count"]) for r in rows] == [(later[0], False, 1), (a[-1], True, 2)]


def test_grouped_items_out_of_the_list_are_no_drift_and_stay_out(
    operator: Any, recipient: Any, clock: Any, settings: Any
) -> None:
    from core.drift import drift_checks
    from messagecenter.items import message_entry
    from messagecenter.readmodel import publish

    settings.MESSAGECENTER_CHECK_GRACE_SECONDS = 0
    refs = _grouped(operator, recipient, clock, ["Ann", "Ben", "Cat"])
    assert drift_checks()["push_deliveries"].find() == []
    # A rerun of the older items' deliveries leaves them in the group, out of the list.
    for message in Message.objects.filter(pk__in=[int(r[1:]) for r in refs]):
        publish.inbox_deliver(entry=message_entry(message), user_ids=[recipient.pk], now_ms=0)
    rows = client_for(recipient).get("/api/v1/inbox/").json()["results"]
    assert [(r["id"], r["group"]["count"]) for r in rows] == [(refs[-1], 3)]


def test_postgresql_keeps_the_groups_and_a_rebuild_puts_them_back(operator: Any, recipient: Any, clock: Any) -> None:
    from messagecenter.models import InboxGroupEnd
    from messagecenter.services.rebuild import inbox_rebuild
    from tests.conftest import flush_redis

    client = client_for(recipient)
    first = _grouped(operator, recipient, clock, ["Ann", "Ben", "Cat"])
    client.post(f"/api/v1/inbox/{first[-1]}/read/")
    second = _grouped(operator, recipient, clock, ["Dan", "Eve"])
    client.post(f"/api/v1/inbox/{second[-1]}/archive/")
    third = _grouped(operator, recipient, clock, ["Fay", "Gus"])
    other = _grouped(operator, recipient, clock, ["Hal", "Ivy"], key="b")
    client.post("/api/v1/inbox/read-all/")
    fourth = _grouped(operator, recipient, clock, ["Jo"])
    # Each ended group is a row in PostgreSQL: the row's time when it ended.
    ends = sorted(InboxGroupEnd.objects.filter(user=recipient).values_list("group_key", "until_ms"))
    assert [key for key, _ in ends] == ["b", "order:42", "order:42", "order:42"]

    def seen() -> Any:
        page = client.get("/api/v1/inbox/").json()
        archived = client.get("/api/v1/inbox/?archived=true").json()["results"]
        return (
            [(r["id"], r["read"], r["group"]) for r in page["results"]],
            [(r["id"], r["group"]) for r in archived],
            page["unread_count"],
            [i["id"] for i in client.get("/api/v1/inbox/?group_key=order:42").json()["results"]],
        )

    before = seen()
    assert [row[:2] for row in before[0]] == [
        (fourth[0], False),
        (other[-1], True),
        (third[-1], True),
        (first[-1], True),
    ]
    assert [row[0] for row in before[1]] == [second[-1]]
    assert before[0][2][2]["count"] == 2
    assert before[0][3][2]["count"] == 3
    flush_redis()
    inbox_rebuild()
    assert seen() == before
