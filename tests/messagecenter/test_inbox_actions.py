"""The inbox actions of the REST API: archive, unarchive, snooze, bulk, search
(``q``), and the bell's ``total_unread``; with bad input, other users' ids,
exact counts, the read cache across a wake time, and a rebuild."""

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest

from durability import outbox
from durability.models import OutboxEntry
from durability.rebuild import rebuild
from messagecenter import selectors
from messagecenter.models import InboxHidden, InboxItemState
from messagecenter.readmodel import inbox as readmodel_inbox
from notices.services import announcement_create
from tests.conftest import assert_error, client_for, flush_redis
from tests.factories import UserFactory
from tests.fixtures.readmodel import redis_refused
from tests.messagecenter.conftest import ids, send, whole_inbox

pytestmark = pytest.mark.django_db(transaction=True)


def _three(operator: Any, recipient: Any, clock: Any) -> list[str]:
    """Three messages, one a second apart, newest last: their ids."""
    refs = []
    for i, category in enumerate(("system", "promotion", "system")):
        clock.advance(seconds=1)
        refs.append(send(operator, to={"users": [recipient]}, category=category, title=f"t{i}").ref)
    return refs


@contextmanager
def _redis_down(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The read model's Redis refuses every connection (nothing listens on port 1)."""
    with monkeypatch.context() as down:
        redis_refused(down)
        yield


def _counts(client: Any) -> dict[str, Any]:
    body: dict[str, Any] = client.get("/api/v1/inbox/counts/").json()
    return body


def test_archive_and_unarchive(operator: Any, recipient: Any, clock: Any) -> None:
    m0, m1, m2 = _three(operator, recipient, clock)
    client = client_for(recipient)
    assert client.post(f"/api/v1/inbox/{m0}/read/").status_code == 204
    assert _counts(client)["unread"] == 2

    response = client.post(f"/api/v1/inbox/{m1}/archive/")
    assert (response.status_code, response.content) == (204, b"")
    listed = client.get("/api/v1/inbox/").json()
    assert [i["id"] for i in listed["results"]] == [m2, m0]
    assert (listed["unread_count"], listed["unseen_count"]) == (1, 2)
    counts = _counts(client)
    assert (counts["unread"], counts["unseen"]) == (1, 2)
    assert counts["by_category"]["promotion"] == 0
    assert ids(client.get("/api/v1/inbox/?archived=true")) == [m1]
    assert ids(client.get("/api/v1/inbox/?archived=true&category=system")) == []
    assert ids(client.get("/api/v1/inbox/?archived=true&category=promotion&unread=true")) == [m1]
    # Idempotent; the detail of an archived item is still there.
    assert client.post(f"/api/v1/inbox/{m1}/archive/").status_code == 204
    assert client.get(f"/api/v1/inbox/{m1}/").json()["title"] == "t1"
    # Marks reach an archived item and move no count.
    assert client.post(f"/api/v1/inbox/{m1}/read/").status_code == 204
    assert _counts(client)["unread"] == 1
    assert client.get("/api/v1/inbox/?archived=true").json()["results"][0]["read"] is True

    # An archived read item goes back read, at its place; the counts follow.
    assert client.post(f"/api/v1/inbox/{m0}/archive/").status_code == 204
    assert ids(client.get("/api/v1/inbox/?archived=true")) == [m1, m0]
    assert client.post(f"/api/v1/inbox/{m0}/unarchive/").status_code == 204
    assert client.post(f"/api/v1/inbox/{m1}/unarchive/").status_code == 204
    assert client.post(f"/api/v1/inbox/{m1}/unarchive/").status_code == 204  # in the list: nothing to do
    listed = client.get("/api/v1/inbox/").json()
    assert [(i["id"], i["read"]) for i in listed["results"]] == [(m2, False), (m1, True), (m0, True)]
    assert listed["unread_count"] == 1
    assert ids(client.get("/api/v1/inbox/?archived=true")) == []


def test_archive_never_reveals_other_users_items(operator: Any, recipient: Any, clock: Any) -> None:
    (m0, _m1, _m2) = _three(operator, recipient, clock)
    stranger = client_for(UserFactory(username="stranger"))
    for action in ("archive", "unarchive"):
        assert_error(stranger.post(f"/api/v1/inbox/{m0}/{action}/"), 404, "not_found")
        assert_error(stranger.post(f"/api/v1/inbox/m999999/{action}/"), 404, "not_found")
        assert_error(stranger.post(f"/api/v1/inbox/m1|x/{action}/"), 404, "not_found")
    assert_error(stranger.post(f"/api/v1/inbox/{m0}/snooze/", {"until": "2026-11-23T00:00:00Z"}, format="json"), 404)
    assert not InboxItemState.objects.exists()
    assert ids(client_for(recipient).get("/api/v1/inbox/"))[-1] == m0


def test_snooze_bad_input_changes_nothing(operator: Any, recipient: Any, clock: Any) -> None:
    (m0, _m1, _m2) = _three(operator, recipient, clock)
    client = client_for(recipient)
    url = f"/api/v1/inbox/{m0}/snooze/"
    past = (clock.now - timedelta(seconds=1)).isoformat()
    far = (clock.now + timedelta(days=366)).isoformat()
    for body in ({"until": past}, {"until": clock.now.isoformat()}, {"until": far}):
        error = assert_error(client.post(url, body, format="json"), 400, "invalid_until")
        assert "until" in str(error)
    for body in ({}, {"until": "tomorrow"}, {"until": 5}, {"until": "2026-11-23T00:00:00Z", "extra": 1}):
        assert_error(client.post(url, body, format="json"), 400)
    assert not InboxItemState.objects.exists()
    assert len(ids(client.get("/api/v1/inbox/"))) == 3
    ok = (clock.now + timedelta(days=365)).isoformat()
    assert client.post(url, {"until": ok}, format="json").status_code == 204


def test_snooze_wakes_unread_at_the_top_past_every_cache(operator: Any, recipient: Any, clock: Any) -> None:
    m0, m1, m2 = _three(operator, recipient, clock)
    client = client_for(recipient)
    assert client.post(f"/api/v1/inbox/{m0}/read/").status_code == 204
    client.post("/api/v1/inbox/seen/")
    until = clock.now + timedelta(minutes=10)
    response = client.post(f"/api/v1/inbox/{m0}/snooze/", {"until": until.isoformat()}, format="json")
    assert (response.status_code, response.content) == (204, b"")
    assert_error(client.post(f"/api/v1/inbox/{m0}/read/"), 404)  # away until it wakes
    assert client.get(f"/api/v1/inbox/{m0}/").status_code == 404
    # Prime every cache before the wake time: the page cache, the counts
    # (read cache and the process's held answers), the counts ETag.
    for _ in range(2):
        assert ids(client.get("/api/v1/inbox/")) == [m2, m1]
        assert selectors.inbox_counts(user=recipient)["unread"] == 2
    first = client.get("/api/v1/inbox/counts/")
    assert (first.json()["unread"], first.json()["unseen"]) == (2, 0)

    clock.advance(minutes=9, seconds=59)
    assert ids(client.get("/api/v1/inbox/")) == [m2, m1]
    clock.advance(seconds=1)  # the wake time: back, unread, at the top, unseen
    assert client.get("/api/v1/inbox/counts/", HTTP_IF_NONE_MATCH=first["ETag"]).status_code == 200
    assert selectors.inbox_counts(user=recipient)["unread"] == 3
    listed = client.get("/api/v1/inbox/").json()
    assert [(i["id"], i["read"]) for i in listed["results"]] == [(m0, False), (m2, False), (m1, False)]
    assert listed["results"][0]["created_at"] == until.isoformat()
    assert (listed["unread_count"], listed["unseen_count"]) == (3, 1)
    counts = _counts(client)
    assert (counts["unread"], counts["by_category"]["system"]) == (3, 2)
    # The item is an ordinary one again: it reads, archives and snoozes.
    assert client.post(f"/api/v1/inbox/{m0}/read/").status_code == 204
    assert _counts(client)["unread"] == 2


def test_snooze_archive_delete_interplay(operator: Any, recipient: Any, clock: Any) -> None:
    m0, m1, m2 = _three(operator, recipient, clock)
    client = client_for(recipient)
    soon = {"until": (clock.now + timedelta(minutes=5)).isoformat()}
    # Snoozing an archived item takes it out of the archive; it wakes into the list.
    client.post(f"/api/v1/inbox/{m0}/archive/")
    assert client.post(f"/api/v1/inbox/{m0}/snooze/", soon, format="json").status_code == 204
    assert ids(client.get("/api/v1/inbox/?archived=true")) == []
    # Archiving a snoozed item cancels the snooze: archived at its own time, still unread.
    client.post(f"/api/v1/inbox/{m1}/snooze/", soon, format="json")
    assert client.post(f"/api/v1/inbox/{m1}/archive/").status_code == 204
    # Unarchiving a snoozed item leaves it snoozed.
    client.post(f"/api/v1/inbox/{m2}/snooze/", soon, format="json")
    assert client.post(f"/api/v1/inbox/{m2}/unarchive/").status_code == 204
    assert ids(client.get("/api/v1/inbox/")) == []
    assert _counts(client)["unread"] == 0
    # Deleting a snoozed item: it never comes back.
    assert client.delete(f"/api/v1/inbox/{m2}/").status_code == 204
    assert InboxHidden.objects.filter(item_id=m2).exists()
    assert not InboxItemState.objects.filter(item_id=m2).exists()

    clock.advance(minutes=6)
    assert ids(client.get("/api/v1/inbox/")) == [m0]
    archived = client.get("/api/v1/inbox/?archived=true").json()["results"]
    assert [(i["id"], i["read"]) for i in archived] == [(m1, False)]
    assert _counts(client)["unread"] == 1
    # Deleting an archived item: gone from the archive too.
    assert client.delete(f"/api/v1/inbox/{m1}/").status_code == 204
    assert ids(client.get("/api/v1/inbox/?archived=true")) == []
    assert_error(client.post(f"/api/v1/inbox/{m1}/unarchive/"), 404)


def test_bulk_actions(operator: Any, recipient: Any, clock: Any) -> None:
    m0, m1, m2 = _three(operator, recipient, clock)
    other = send(operator, to={"users": [UserFactory(username="other")]}, title="not yours").ref
    client = client_for(recipient)

    def bulk(action: str, refs: list[Any]) -> int:
        response = client.post("/api/v1/inbox/bulk/", {"action": action, "ids": refs}, format="json")
        assert response.status_code == 200, response.content
        done: int = response.json()["done"]
        return done

    assert bulk("read", [m0, m1, other, "m999999", 12, m0]) == 2
    assert _counts(client)["unread"] == 1
    assert bulk("unread", [m1]) == 1
    assert bulk("archive", [m0, m1, other]) == 2
    assert ids(client.get("/api/v1/inbox/?archived=true")) == [m1, m0]
    assert _counts(client)["unread"] == 1
    assert bulk("read", [m1]) == 1  # an archived item keeps its flag
    assert bulk("unarchive", [m1, m2]) == 2
    listed = client.get("/api/v1/inbox/").json()
    assert [(i["id"], i["read"]) for i in listed["results"]] == [(m2, False), (m1, True)]
    assert bulk("delete", [m0, m2, other]) == 2
    assert ids(client.get("/api/v1/inbox/")) == [m1]
    assert ids(client.get("/api/v1/inbox/?archived=true")) == []
    assert bulk("delete", [m0]) == 0  # gone: not in the inbox any more
    # Someone else's item is untouched.
    assert ids(client_for(operator.__class__.objects.get(username="other")).get("/api/v1/inbox/")) == [other]


def test_bulk_bad_input_changes_nothing(operator: Any, recipient: Any, clock: Any) -> None:
    m0, _m1, _m2 = _three(operator, recipient, clock)
    client = client_for(recipient)
    url = "/api/v1/inbox/bulk/"
    bodies: list[Any] = [
        {"action": "explode", "ids": [m0]},
        {"action": "read", "ids": []},
        {"action": "read", "ids": [m0] * 101},
        {"action": "read"},
        {"ids": [m0]},
        {"action": "read", "ids": m0},
        {"action": "read", "ids": [m0, "abc"]},
        {"action": "read", "ids": [m0, ""]},
        {"action": "read", "ids": [m0, 1.5]},
        {"action": "read", "ids": [m0, True]},
        {"action": "read", "ids": [m0, None]},
        {"action": "read", "ids": [m0, -3]},
        {"action": "read", "ids": [m0, "m1|x"]},
        {"action": "read", "ids": [m0], "extra": 1},
    ]
    for body in bodies:
        assert_error(client.post(url, body, format="json"), 400)
    assert _counts(client)["unread"] == 3
    assert client.post(url, {"action": "read", "ids": [m0] * 100}, format="json").json() == {"done": 1}


def test_search(operator: Any, recipient: Any, clock: Any) -> None:
    made = []
    for title, summary, category in (
        ("Grüße aus der Straße", "", "system"),
        ("中文标题测试", "摘要", "promotion"),
        ("Sale", "huge STRASSE sale", "promotion"),
        ("Nothing", "here", "system"),
        ("ΣΊΣΥΦΟΣ", "", "system"),
    ):
        clock.advance(seconds=1)
        made.append(send(operator, to={"users": [recipient]}, category=category, title=title, summary=summary).ref)
    grusse, chinese, sale, _nothing, greek = made
    client = client_for(recipient)

    def q(query: str, extra: str = "") -> list[str]:
        response = client.get("/api/v1/inbox/", {"q": query, **dict(p.split("=") for p in extra.split("&") if p)})
        assert response.status_code == 200, response.content
        return [i["id"] for i in response.json()["results"]]

    assert q("strasse") == [sale, grusse]  # casefold: ß is ss
    assert q("标题") == [chinese]
    assert q("摘要") == [chinese]
    assert q("σίσυφος") == [greek]
    assert q("SALE") == [sale]
    assert q("strasse", "category=promotion") == [sale]
    client.post(f"/api/v1/inbox/{sale}/read/")
    assert q("strasse", "unread=true") == [grusse]
    client.post(f"/api/v1/inbox/{grusse}/archive/")
    assert q("strasse") == [sale]
    assert q("strasse", "archived=true") == [grusse]
    assert q("no such text") == []
    body = client.get("/api/v1/inbox/", {"q": "s"}).json()
    assert body["unread_count"] == 3  # the counts cover the whole inbox
    # Paging a search: every match once, in order.
    seen: list[str] = []
    cursor = None
    while True:
        params = {"q": "e", "limit": "1", **({"cursor": cursor} if cursor else {})}
        page = client.get("/api/v1/inbox/", params).json()
        seen += [i["id"] for i in page["results"]]
        if (cursor := page["next_cursor"]) is None:
            break
    assert seen == [_nothing, sale]
    # Bad input.
    assert_error(client.get("/api/v1/inbox/", {"q": "x" * 201}), 400, "invalid_q")
    assert q("x" * 200) == []
    cursor = client.get("/api/v1/inbox/", {"q": "e", "limit": "1"}).json()["next_cursor"]
    assert_error(client.get("/api/v1/inbox/", {"q": "a", "cursor": cursor}), 400, "invalid_cursor")
    assert_error(client.get("/api/v1/inbox/", {"cursor": cursor}), 400, "invalid_cursor")
    assert_error(client.get("/api/v1/inbox/", {"archived": "maybe"}), 400)


def test_counts_total_unread(operator: Any, recipient: Any, clock: Any) -> None:
    _three(operator, recipient, clock)
    announcement_create(author=None, title="A", body_html="<p>a</p>", platforms=["user"], publish_at=None)
    counts = _counts(client_for(recipient))
    assert counts["by_category"]["announcement"] == 1
    assert counts["total_unread"] == counts["unread"] + 1 == 4


@pytest.mark.usefixtures("fill_on_read")
def test_archives_and_snoozes_survive_a_flush_and_rebuild(operator: Any, recipient: Any, clock: Any) -> None:
    m0, m1, m2 = _three(operator, recipient, clock)
    pulled = send(operator, to={"everyone": True}, title="for everyone").ref
    client = client_for(recipient)
    client.post(f"/api/v1/inbox/{m0}/read/")
    client.post(f"/api/v1/inbox/{m0}/archive/")
    client.post(f"/api/v1/inbox/{pulled}/archive/")
    until = clock.now + timedelta(minutes=5)
    client.post(f"/api/v1/inbox/{m1}/snooze/", {"until": until.isoformat()}, format="json")
    before = (ids(client.get("/api/v1/inbox/")), ids(client.get("/api/v1/inbox/?archived=true")), _counts(client))
    assert before[:2] == ([m2], [pulled, m0])

    flush_redis()
    rebuild()
    after = (ids(client.get("/api/v1/inbox/")), ids(client.get("/api/v1/inbox/?archived=true")), _counts(client))
    assert after == before
    assert client.get("/api/v1/inbox/?archived=true").json()["results"][1]["read"] is True
    clock.advance(minutes=5)
    listed = client.get("/api/v1/inbox/").json()
    assert [(i["id"], i["read"]) for i in listed["results"]] == [(m1, False), (m2, False)]


def test_actions_with_redis_down_are_kept_and_replayed(
    operator: Any, recipient: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answered 2xx with Redis down: the rows are in PostgreSQL, the fallback
    shows them at once, and the outbox brings Redis to the same state."""
    m0, m1, m2 = _three(operator, recipient, clock)
    client = client_for(recipient)
    assert ids(client.get("/api/v1/inbox/")) == [m2, m1, m0]
    with _redis_down(monkeypatch):
        assert client.post(f"/api/v1/inbox/{m0}/archive/").status_code == 204
        until = clock.now + timedelta(minutes=5)
        assert (
            client.post(f"/api/v1/inbox/{m1}/snooze/", {"until": until.isoformat()}, format="json").status_code == 204
        )
        assert ids(client.get("/api/v1/inbox/")) == [m2]
        assert ids(client.get("/api/v1/inbox/?archived=true")) == [m0]
        assert _counts(client)["unread"] == 1
        assert OutboxEntry.objects.exists()
    assert outbox.replay() > 0
    assert not OutboxEntry.objects.exists()
    now_ms = int(clock.now.timestamp() * 1000)
    page = readmodel_inbox.inbox_listing(user_id=recipient.pk, now_ms=now_ms, **whole_inbox(20), archived=True)
    assert [row.ref for row in page.rows] == [m0]
    assert page.counts.unread == 1
    clock.advance(minutes=5)
    assert ids(client.get("/api/v1/inbox/")) == [m1, m2]


def test_a_read_all_queued_while_a_cancelled_snooze_kept_the_item_away_leaves_it_unread(
    operator: Any, recipient: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Snoozed, then a "read all" accepted with Redis down, then archived (which
    cancels the snooze): the item was out of the list when the "read all" ran,
    so PostgreSQL's answer keeps it unread, as Redis does. Unarchived, it is
    in the list again, and the next "read all" reaches it."""
    m0, m1, m2 = _three(operator, recipient, clock)
    client = client_for(recipient)
    until = {"until": (clock.now + timedelta(minutes=5)).isoformat()}
    assert client.post(f"/api/v1/inbox/{m1}/snooze/", until, format="json").status_code == 204

    def archived() -> list[tuple[str, bool]]:
        return [(i["id"], i["read"]) for i in client.get("/api/v1/inbox/?archived=true").json()["results"]]

    with _redis_down(monkeypatch):
        clock.advance(seconds=1)
        assert client.post("/api/v1/inbox/read-all/").json() == {"marked": 2}  # m0 and m2: m1 is away
        clock.advance(seconds=1)
        assert client.post(f"/api/v1/inbox/{m1}/archive/").status_code == 204
        assert archived() == [(m1, False)]
        clock.advance(seconds=1)
        assert client.post(f"/api/v1/inbox/{m1}/unarchive/").status_code == 204
        assert _counts(client)["unread"] == 1
        clock.advance(seconds=1)
        assert client.post("/api/v1/inbox/read-all/").json() == {"marked": 1}
        assert _counts(client)["unread"] == 0
    # Redis, once the queued marks are replayed, says the same.
    assert outbox.replay() > 0
    listed = [(i["id"], i["read"]) for i in client.get("/api/v1/inbox/").json()["results"]]
    assert listed == [(m2, True), (m1, True), (m0, True)]
    assert _counts(client)["unread"] == 0
