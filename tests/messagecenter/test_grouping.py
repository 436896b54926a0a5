"""Grouped items over REST: one row per unread group, its count and actors,
the row acting for the whole group, the key's list and bad inputs."""

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from redis.exceptions import RedisError

from core.local_cache import local_caches_clear
from durability import healing
from messagecenter import keys as mc_keys
from messagecenter import services
from messagecenter.fill import inbox_warm
from messagecenter.models import InboxGroupEnd, InboxHidden, Message
from messagecenter.readmodel import grouping as readmodel_grouping
from messagecenter.readmodel.user_part import user_part_drop
from messagecenter.services.rebuild import inbox_rebuild
from tests.conftest import assert_error, client_for
from tests.messagecenter.conftest import ids, send

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGES = "/api/v1/manage/messages/"


def _post(client: Any, user: Any, title: str, **extra: Any) -> str:
    body = {"category": "interaction", "title": title, "body_html": "<p>x</p>", "to": {"users": [user.pk]}, **extra}
    response = client.post(MESSAGES, body, format="json")
    assert response.status_code == 202, response.content
    return f"m{response.json()['id']}"


def _grouped(
    operator: Any, recipient: Any, clock: Any, actors: list[str], key: str = "order:42", **extra: Any
) -> list[str]:
    """One message a second from each actor under ``key``, to the recipient (or
    ``to``), with any other create field in ``extra``; their refs, oldest first."""
    to = extra.pop("to", {"users": [recipient]})
    refs = []
    for actor in actors:
        clock.advance(seconds=1)
        title = f"{actor} commented"
        message = send(operator, to=to, category="interaction", title=title, group_key=key, actor=actor, **extra)
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


def test_a_page_reads_its_rows_groups_in_its_own_call_on_either_path(operator: Any, recipient: Any, clock: Any) -> None:
    """The fast path and the planned one (a process without the user's months
    hint, and every read on a cluster) both bring the rows' groups with the
    page: the selector never looks them up again."""
    refs = _grouped(operator, recipient, clock, ["Ann", "Ben"])
    client = client_for(recipient)
    with mock.patch.object(readmodel_grouping, "groups_of", side_effect=AssertionError("a second lookup")):
        local_caches_clear()
        for _ in range(2):  # planned (no months hint), then the fast path the first read left the hint for
            page = client.get("/api/v1/inbox/").json()
            assert [(r["id"], r["group"]) for r in page["results"]] == [(refs[1], GROUP_OF(2, ["Ben", "Ann"]))]


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


def test_grouped_items_out_of_the_list_agree_with_postgresql_and_stay_out(
    operator: Any, recipient: Any, clock: Any
) -> None:
    from messagecenter.items import message_entry
    from messagecenter.readmodel import publish

    refs = _grouped(operator, recipient, clock, ["Ann", "Ben", "Cat"])
    _agree(client_for(recipient), refs)
    # A rerun of the older items' deliveries leaves them in the group, out of the list.
    for message in Message.objects.filter(pk__in=[int(r[1:]) for r in refs]):
        publish.inbox_deliver(entry=message_entry(message), user_ids=[recipient.pk], now_ms=0)
    rows = client_for(recipient).get("/api/v1/inbox/").json()["results"]
    assert [(r["id"], r["group"]["count"]) for r in rows] == [(refs[-1], 3)]


def test_postgresql_keeps_the_groups_and_a_rebuild_puts_them_back(operator: Any, recipient: Any, clock: Any) -> None:
    from messagecenter.models import InboxGroupEnd
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
    # What users share is back; each user's part is filled from PostgreSQL.
    inbox_warm(user_ids=[recipient.pk])
    assert seen() == before


# --- Redis down: PostgreSQL answers the same ------------------------------------------


@contextmanager
def _redis_down() -> Iterator[None]:
    """Reads find Redis unavailable (as when it is down) and answer from PostgreSQL."""
    with mock.patch.object(healing, "require_ready", side_effect=RedisError("down (test)")):
        yield


def _everything(client: Any, refs: list[str]) -> Any:
    """What the API shows of the inbox: rows with their groups, the archived
    list, counts, each key's listing, and every item."""
    page = client.get("/api/v1/inbox/").json()
    archived = client.get("/api/v1/inbox/?archived=true").json()
    listings = {key: client.get(f"/api/v1/inbox/?group_key={key}&limit=2").json() for key in ("order:42", "order:7")}
    items = {ref: client.get(f"/api/v1/inbox/{ref}/") for ref in refs}
    return (
        [(r["id"], r["read"], r["created_at"], r["group"]) for r in page["results"]],
        [(r["id"], r["group"]) for r in archived["results"]],
        page["unread_count"],
        client.get("/api/v1/inbox/counts/").json()["unread"],
        {k: ([(i["id"], i["read"]) for i in v["results"]], bool(v["next_cursor"])) for k, v in listings.items()},
        {ref: (r.status_code, r.json().get("group")) for ref, r in items.items()},
    )


def _agree(client: Any, refs: list[str]) -> Any:
    up = _everything(client, refs)
    with _redis_down():
        down = _everything(client, refs)
    assert down == up
    return up


@pytest.mark.django_db(transaction=True)
def test_postgresql_groups_as_redis_does(operator: Any, recipient: Any, clock: Any) -> None:
    """Rows, counts, listings and items of grouped items are the same with Redis
    down at every step: arrivals, a read, a read-all, an archive, a snooze and a
    delete between them."""
    client = client_for(recipient)
    refs = _grouped(operator, recipient, clock, ["Ann", "Ben", "Ann", "Cat", "Dan"])
    seen = _agree(client, refs)
    assert seen[0] == [(refs[-1], False, "2026-11-22T10:00:05+00:00", GROUP_OF(5, ["Dan", "Cat", "Ann"]))]
    assert seen[2:4] == (1, 1)
    assert seen[4]["order:42"] == ([(refs[4], False), (refs[3], False)], True)
    assert {ref: code for ref, (code, _) in seen[5].items()} == {**dict.fromkeys(refs[:-1], 404), refs[-1]: 200}

    client.post(f"/api/v1/inbox/{refs[-1]}/read/")
    refs += _grouped(operator, recipient, clock, ["Eve"]) + _grouped(operator, recipient, clock, ["Fay"], key="order:7")
    seen = _agree(client, refs)
    assert [(r[0], r[1], r[3]["count"]) for r in seen[0]] == [
        (refs[6], False, 1),
        (refs[5], False, 1),
        (refs[4], True, 5),
    ]
    assert seen[4]["order:42"] == ([(refs[5], False), (refs[4], True)], True)

    client.post("/api/v1/inbox/read-all/")
    refs += _grouped(operator, recipient, clock, ["Gus"]) + _grouped(operator, recipient, clock, ["Hal"])
    _agree(client, refs)
    client.post(f"/api/v1/inbox/{refs[-1]}/archive/")
    refs += _grouped(operator, recipient, clock, ["Ivy"], key="order:7")
    seen = _agree(client, refs)
    assert seen[1] == [(refs[8], GROUP_OF(2, ["Hal", "Gus"]))]
    # Ivy's key ended at Fay's row with the read-all: a new group of one.
    assert [(r[0], r[3]["count"]) for r in seen[0]] == [(refs[9], 1), (refs[6], 1), (refs[5], 1), (refs[4], 5)]
    client.delete(f"/api/v1/inbox/{refs[9]}/")
    seen = _agree(client, refs)
    assert [r[0] for r in seen[0]] == [refs[6], refs[5], refs[4]]


def GROUP_OF(count: int, actors: list[str], key: str = "order:42") -> dict[str, Any]:
    return {"key": key, "count": count, "actors": actors}


@pytest.mark.django_db(transaction=True)
def test_an_item_in_the_millisecond_of_the_read_starts_a_new_group(operator: Any, recipient: Any, clock: Any) -> None:
    """The end keeps the row it ended at: an item at the same time that the
    list puts above the row is past the end (a new row), on both paths and
    through a rebuild."""
    from tests.conftest import flush_redis

    client = client_for(recipient)
    first = send(operator, to={"users": [recipient]}, category="interaction", title="a", group_key="order:42")
    client.post(f"/api/v1/inbox/m{first.pk}/read/")
    second = send(operator, to={"users": [recipient]}, category="interaction", title="b", group_key="order:42")
    assert InboxGroupEnd.objects.get().row_ref == f"m{first.pk}"
    before = _agree(client, [f"m{first.pk}", f"m{second.pk}"])
    assert [(r[0], r[1], r[3]["count"]) for r in before[0]] == [(f"m{second.pk}", False, 1), (f"m{first.pk}", True, 1)]
    flush_redis()
    inbox_rebuild()
    inbox_warm(user_ids=[recipient.pk])
    assert _agree(client, [f"m{first.pk}", f"m{second.pk}"]) == before


# --- Snoozing a grouped row ---------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_snoozing_the_row_snoozes_the_group_and_ends_it(operator: Any, recipient: Any, clock: Any) -> None:
    """Like read, archive and delete, a snooze acts for the whole group: the
    row (its older items out of the list already) is away until it wakes, the
    group ends, and an item of the key arriving meanwhile is a new row (it
    does not take the sleeping one's place); at its wake time the row is back
    with its group. The same with Redis down."""
    client = client_for(recipient)
    refs = _grouped(operator, recipient, clock, ["Ann", "Ben"])
    until = (clock.now + timedelta(minutes=10)).isoformat()
    assert client.post(f"/api/v1/inbox/{refs[-1]}/snooze/", {"until": until}, format="json").status_code in (200, 204)
    assert list(InboxGroupEnd.objects.values_list("group_key", "row_ref")) == [("order:42", refs[-1])]
    assert _agree(client, refs)[0] == []
    later = _grouped(operator, recipient, clock, ["Cat"])
    seen = _agree(client, refs + later)
    assert [(r[0], r[3]) for r in seen[0]] == [(later[0], GROUP_OF(1, ["Cat"]))]
    clock.advance(minutes=11)
    seen = _agree(client, refs + later)
    assert [(r[0], r[1], r[3]) for r in seen[0]] == [
        (refs[-1], False, GROUP_OF(2, ["Ben", "Ann"])),
        (later[0], False, GROUP_OF(1, ["Cat"])),
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("action", ["read", "snooze", "delete", "read-all"])
def test_a_row_acted_on_with_redis_down_ends_its_group_in_postgresql(
    operator: Any, recipient: Any, clock: Any, action: str
) -> None:
    """Redis fails when the group should end: PostgreSQL decides it (the end,
    and for a delete the older items' deletes), reads agree meanwhile, and the
    outbox gives Redis its half once it is back."""
    from durability import outbox

    client = client_for(recipient)
    refs = _grouped(operator, recipient, clock, ["Ann", "Ben"])
    with mock.patch.object(readmodel_grouping, "get_redis", side_effect=RedisError("down (test)")):
        if action == "read":
            services.inbox_mark_read(user=recipient, item_id=refs[-1])
        elif action == "snooze":
            services.inbox_snooze(user=recipient, item_id=refs[-1], until=clock.now + timedelta(minutes=10))
        elif action == "delete":
            services.inbox_hide(user=recipient, item_id=refs[-1])
        else:
            services.inbox_mark_all_read(user=recipient)
    assert list(InboxGroupEnd.objects.values_list("group_key", "row_ref")) == [("order:42", refs[-1])]
    if action == "delete":
        assert set(InboxHidden.objects.filter(user=recipient).values_list("item_id", flat=True)) == set(refs)
    with _redis_down():
        down = _everything(client, refs)
    assert [(r[0], r[1], r[3]["count"]) for r in down[0]] == (
        [(refs[-1], True, 2)] if action in ("read", "read-all") else []
    )
    # Redis is back: the outbox's entries (the row's own and its group's) bring it level.
    assert outbox.replay() > 0
    assert _agree(client, refs) == down
    later = _grouped(operator, recipient, clock, ["Cat"])
    seen = _agree(client, refs + later)
    assert [(r[0], r[3]["count"]) for r in seen[0]][:1] == [(later[0], 1)]


def test_a_retracted_item_leaves_its_group_which_re_forms_from_the_rest(
    operator: Any, operator_client: Any, recipient: Any, other_recipient: Any, clock: Any
) -> None:
    """Retracting the row's item makes the newest item left the row; retracting
    an older one takes it out of the count and the actors; the same on both paths."""
    client = client_for(recipient)
    refs = _grouped(operator, recipient, clock, ["Ann", "Ben", "Cat", "Dan"])
    other = client_for(other_recipient)
    kept = send(operator, to={"users": [other_recipient]}, title="Untouched")
    assert _agree(client, refs)[0][0][3] == GROUP_OF(4, ["Dan", "Cat", "Ben"])
    assert [r["id"] for r in other.get("/api/v1/inbox/").json()["results"]] == [f"m{kept.pk}"]

    assert operator_client.delete(f"{MESSAGES}{refs[-1][1:]}/").status_code == 204
    seen = _agree(client, refs)
    assert [(r[0], r[1], r[3]) for r in seen[0]] == [(refs[2], False, GROUP_OF(3, ["Cat", "Ben", "Ann"]))]
    assert seen[2:4] == (1, 1)
    assert seen[4]["order:42"][0] == [(refs[2], False), (refs[1], False)]

    assert operator_client.delete(f"{MESSAGES}{refs[1][1:]}/").status_code == 204
    seen = _agree(client, refs)
    assert [(r[0], r[3]) for r in seen[0]] == [(refs[2], GROUP_OF(2, ["Cat", "Ann"]))]
    assert {ref: code for ref, (code, _) in seen[5].items()} == {
        refs[0]: 404,  # in the group, not its row
        refs[1]: 404,
        refs[2]: 200,
        refs[3]: 404,
    }
    # The next item of the key joins the re-formed group.
    refs += _grouped(operator, recipient, clock, ["Eve"])
    assert _agree(client, refs)[0][0][3] == GROUP_OF(3, ["Eve", "Cat", "Ann"])


@pytest.mark.parametrize("removal", ["retracted", "expired"])
@pytest.mark.parametrize("filling", [False, True], ids=["every part kept", "parts filled on read"])
def test_a_removed_broadcast_leaves_its_group_which_re_forms_from_the_rest(
    operator: Any,
    operator_client: Any,
    recipient: Any,
    other_recipient: Any,
    clock: Any,
    removal: str,
    filling: bool,
    request: pytest.FixtureRequest,
) -> None:
    """A grouped message for everyone (merged on read, no list of recipients):
    removing the row's item re-forms the group of every user who holds it
    (whose part Redis holds, when parts are filled on read)."""
    if filling:
        request.getfixturevalue("fill_on_read")
    everyone = {"everyone": True}
    refs = _grouped(operator, recipient, clock, ["Ann", "Ben"], to=everyone)
    refs += _grouped(operator, recipient, clock, ["Cat"], to=everyone, expire_at=clock.now + timedelta(minutes=5))
    assert Message.objects.get(pk=refs[0][1:]).delivery == "pull"
    clients = [client_for(recipient), client_for(other_recipient)]
    for client in clients:
        assert _agree(client, refs)[0][0][3] == GROUP_OF(3, ["Cat", "Ben", "Ann"])

    if removal == "retracted":
        assert operator_client.delete(f"{MESSAGES}{refs[-1][1:]}/").status_code == 204
    else:
        clock.advance(minutes=6)
        assert services.message_cleanup_expired() == 1
    for client in clients:
        seen = _agree(client, refs)
        assert [(r[0], r[3]) for r in seen[0]] == [(refs[1], GROUP_OF(2, ["Ben", "Ann"]))]
        assert seen[2:4] == (1, 1)


def _reviews_grouped(
    operator_client: Any, recipient: Any, clock: Any, lives: tuple[int, int, int] = (3600, 3600, 60)
) -> list[str]:
    """Three grouped notifications (key "pr:1") from Ann, Ben and Cat a second
    apart, to the recipient's subscription, living ``lives`` seconds each (Cat's
    a minute unless told). Their ids."""
    assert (
        operator_client.post(
            "/api/v1/manage/message-types/", {"code": "review", "name": "Review"}, format="json"
        ).status_code
        == 201
    )
    sub = {"message_type": "review", "scope": "PR1", "user": recipient.pk}
    assert operator_client.post("/api/v1/manage/subscriptions/", sub, format="json").status_code == 201
    sent = []
    for actor, ttl in zip(("Ann", "Ben", "Cat"), lives, strict=True):
        clock.advance(seconds=1)
        body = {"message_type": "review", "scope": "PR1", "title": f"{actor} reviewed", "body_html": "<p>x</p>"}
        answer = operator_client.post(
            "/api/v1/manage/notifications/",
            {**body, "group_key": "pr:1", "actor": actor, "ttl_seconds": ttl},
            format="json",
        )
        assert answer.status_code == 202, answer.content
        sent.append(str(answer.json()["id"]))
    return sent


@pytest.mark.parametrize("removal", ["withdrawn", "expired"])
def test_a_removed_notification_leaves_its_group(
    operator_client: Any, recipient: Any, clock: Any, removal: str
) -> None:
    sent = _reviews_grouped(operator_client, recipient, clock)
    client = client_for(recipient)
    assert client.get("/api/v1/inbox/").json()["results"][0]["group"]["count"] == 3
    if removal == "withdrawn":
        assert operator_client.delete(f"/api/v1/manage/notifications/{sent[-1]}/").status_code == 204
    else:
        clock.advance(minutes=2)
        assert services.notification_sweep()["details_freed"] == 1
    rows = client.get("/api/v1/inbox/").json()["results"]
    assert [(r["id"], r["group"]) for r in rows] == [(f"n{sent[1]}", GROUP_OF(2, ["Ben", "Ann"], key="pr:1"))]
    with _redis_down():
        assert client.get("/api/v1/inbox/").json()["results"] == rows


def test_an_expired_row_gives_way_to_the_rest_of_its_group_once_swept(
    operator: Any, recipient: Any, clock: Any
) -> None:
    """The newest item of a group expires: once the expiry job has run, the
    newest item left is the row, counted without it, on both paths."""
    client = client_for(recipient)
    refs = _grouped(operator, recipient, clock, ["Ann", "Ben"])
    refs += _grouped(operator, recipient, clock, ["Cat"], expire_at=clock.now + timedelta(minutes=5, seconds=1))
    assert _agree(client, refs)[0][0][3] == GROUP_OF(3, ["Cat", "Ben", "Ann"])
    clock.advance(minutes=6)
    assert services.message_cleanup_expired() == 1
    seen = _agree(client, refs)
    assert [(r[0], r[3]) for r in seen[0]] == [(refs[1], GROUP_OF(2, ["Ben", "Ann"]))]
    assert seen[2:4] == (1, 1)


@pytest.mark.parametrize("threshold", [1000, 1], ids=["pushed", "merged on read"])
def test_an_expired_row_gives_way_at_once_before_any_job_runs(
    operator: Any, recipient: Any, clock: Any, settings: Any, threshold: int
) -> None:
    """The moment a group's row expires, the next read shows the newest item
    left as the row, counted without it, on both paths: no sweep has run, and
    a page, the counts and a single item all agree."""
    settings.MESSAGECENTER_PUSH_THRESHOLD = threshold
    client = client_for(recipient)
    refs = _grouped(operator, recipient, clock, ["Ann", "Ben"])
    refs += _grouped(operator, recipient, clock, ["Cat"], expire_at=clock.now + timedelta(minutes=5, seconds=1))
    assert _agree(client, refs)[0][0][3] == GROUP_OF(3, ["Cat", "Ben", "Ann"])
    clock.advance(minutes=6)
    assert client.get("/api/v1/inbox/counts/").json()["unread"] == 1
    seen = _agree(client, refs)
    assert [(r[0], r[3]) for r in seen[0]] == [(refs[1], GROUP_OF(2, ["Ben", "Ann"]))]
    assert seen[2:4] == (1, 1)
    assert client.get(f"/api/v1/inbox/{refs[1]}/").status_code == 200
    assert client.get(f"/api/v1/inbox/{refs[2]}/").status_code == 404


def test_a_read_all_right_after_a_rows_expiry_reads_the_re_formed_group(
    operator: Any, recipient: Any, clock: Any
) -> None:
    """A "read all" that meets an expired row (its Redis half changes nothing)
    fills the user again at once: the re-formed group reads as read."""
    client = client_for(recipient)
    refs = _grouped(operator, recipient, clock, ["Ann", "Ben"])
    refs += _grouped(operator, recipient, clock, ["Cat"], expire_at=clock.now + timedelta(minutes=5, seconds=1))
    assert _agree(client, refs)[2:4] == (1, 1)
    clock.advance(minutes=6)
    assert client.post("/api/v1/inbox/read-all/").status_code == 200
    seen = _agree(client, refs)
    assert [(r[0], r[1], r[3]) for r in seen[0]] == [(refs[1], True, GROUP_OF(2, ["Ben", "Ann"]))]
    assert seen[2:4] == (0, 0)


@pytest.mark.parametrize("threshold", [1000, 1], ids=["pushed", "merged on read"])
def test_a_deleted_grouped_item_stays_out_of_its_keys_listing_after_a_refill(
    operator: Any, recipient: Any, other_recipient: Any, clock: Any, settings: Any, threshold: int
) -> None:
    """A refill (after a loss) does not place a deleted item again, not even
    in its key's listing, whether it was pushed or is merged on read; the same
    on both paths."""
    from tests.conftest import flush_redis

    settings.MESSAGECENTER_PUSH_THRESHOLD = threshold
    client = client_for(recipient)
    both = {"users": [recipient, other_recipient]}
    refs = _grouped(operator, recipient, clock, ["Ann", "Ben"], to=both)
    assert Message.objects.get(pk=refs[0][1:]).delivery == ("push" if threshold > 1 else "pull")
    client.post(f"/api/v1/inbox/{refs[-1]}/read/")  # the group ends: the next item starts a new one
    refs += _grouped(operator, recipient, clock, ["Cat"], to=both)
    assert client.delete(f"/api/v1/inbox/{refs[-1]}/").status_code == 204
    before = _agree(client, refs)
    assert before[4]["order:42"][0] == [(refs[1], True), (refs[0], True)]
    flush_redis()
    inbox_rebuild()
    inbox_warm(user_ids=[recipient.pk])
    assert _agree(client, refs) == before


@pytest.mark.parametrize("threshold", [1000, 1], ids=["pushed", "merged on read"])
def test_an_older_item_expiring_shows_in_its_groups_count_at_the_next_read(
    operator: Any, recipient: Any, clock: Any, settings: Any, threshold: int
) -> None:
    """An older item of a group expires (not the row): the very next page
    counts the group without it and drops it from the actors, though no job
    has run; a page rendered and kept before the expiry is not served past it,
    and PostgreSQL agrees."""
    settings.MESSAGECENTER_PUSH_THRESHOLD = threshold
    client = client_for(recipient)
    refs = _grouped(operator, recipient, clock, ["Ann"], expire_at=clock.now + timedelta(minutes=5))
    refs += _grouped(operator, recipient, clock, ["Ben", "Cat"])
    assert _agree(client, refs)[0][0][3] == GROUP_OF(3, ["Cat", "Ben", "Ann"])
    assert client.get("/api/v1/inbox/").json()["results"][0]["group"]["count"] == 3  # kept rendering
    clock.advance(minutes=6)
    rows = client.get("/api/v1/inbox/").json()["results"]
    assert [(r["id"], r["group"]) for r in rows] == [(refs[2], GROUP_OF(2, ["Cat", "Ben"]))]
    seen = _agree(client, refs)
    assert seen[2:4] == (1, 1)
    assert seen[4]["order:42"][0] == [(refs[2], False), (refs[1], False)]
    assert client.get(f"/api/v1/inbox/{refs[0]}/").status_code == 404
    # Nothing is left for a job to re-form: the full cleanup only frees the item.
    assert services.message_cleanup_expired() == 1
    assert _agree(client, refs) == seen


def test_an_older_notification_expiring_shows_in_its_groups_count_at_the_next_read(
    operator_client: Any, recipient: Any, clock: Any
) -> None:
    sent = _reviews_grouped(operator_client, recipient, clock, lives=(60, 3600, 3600))
    client = client_for(recipient)
    assert client.get("/api/v1/inbox/").json()["results"][0]["group"]["count"] == 3
    clock.advance(minutes=2)
    rows = client.get("/api/v1/inbox/").json()["results"]
    assert [(r["id"], r["group"]) for r in rows] == [(f"n{sent[2]}", GROUP_OF(2, ["Cat", "Ben"], key="pr:1"))]
    with _redis_down():
        assert client.get("/api/v1/inbox/").json()["results"] == rows


def test_an_expired_row_a_delivery_evicts_gives_way_at_the_next_read(
    operator: Any, recipient: Any, clock: Any, settings: Any
) -> None:
    """An inbox at its cap gets an item after a group's row expired: the
    delivery evicts that row to keep the cap (no read has settled it yet). The
    next read still shows the rest of the group re-formed (the cap counts
    items, so of Ann's and Ben's only Ben's is kept), on both paths."""
    settings.MESSAGECENTER_INBOX_MAX_ITEMS = 2
    client = client_for(recipient)
    plain = [f"m{send(operator, to={'users': [recipient]}, title='Plain').pk}"]
    refs = _grouped(operator, recipient, clock, ["Ann", "Ben"])
    refs += _grouped(operator, recipient, clock, ["Cat"], expire_at=clock.now + timedelta(minutes=5, seconds=1))
    assert [r[0] for r in _agree(client, plain + refs)[0]] == [refs[2], plain[0]]
    clock.advance(minutes=6)
    plain.append(f"m{send(operator, to={'users': [recipient]}, title='Plain').pk}")
    seen = _agree(client, plain + refs)
    assert [(r[0], r[3]) for r in seen[0]] == [(plain[1], None), (refs[1], GROUP_OF(1, ["Ben"]))]


@pytest.mark.django_db(transaction=True)
def test_a_fill_at_the_cap_reads_as_many_items_as_the_groups_rows_need(
    operator: Any, recipient: Any, clock: Any, settings: Any
) -> None:
    """The cap counts rows, and a group's items share one: at a cap of 2 the
    deliveries keep three grouped items and a plain one. A fill reading only
    the newest 2 items would bring back one row of two items; it reads on
    until it has the rows, so after a drop the inbox is the one delivered."""
    settings.MESSAGECENTER_INBOX_MAX_ITEMS = 2
    client = client_for(recipient)
    plain = f"m{send(operator, to={'users': [recipient]}, title='Plain').pk}"
    refs = _grouped(operator, recipient, clock, ["Ann", "Ben", "Cat"])
    delivered = _agree(client, [plain, *refs])
    assert [(r[0], r[3] and r[3]["count"]) for r in delivered[0]] == [(refs[2], 3), (plain, None)]
    user_part_drop(user_id=int(recipient.pk), group_keys=())
    assert inbox_warm(user_ids=[int(recipient.pk)]) == 1
    assert _agree(client, [plain, *refs]) == delivered
