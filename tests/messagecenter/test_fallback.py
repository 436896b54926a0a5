"""Degraded reads: the inbox answered from PostgreSQL alone (``messagecenter.fallback``)
with Redis unreachable: the API, the pages, pending marks, bounds.

That the fallback equals the Redis path over random operations is the one
property of test_inbox_property.py.
"""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import redis as redis_lib
from django.test import Client
from redis.backoff import NoBackoff
from redis.retry import Retry

from durability.models import OutboxEntry
from messagecenter import fallback, services
from messagecenter.models import (
    DeliveryMode,
    Message,
)
from tests.conftest import assert_error, client_for
from tests.messagecenter.conftest import make_group, send, whole_inbox

pytestmark = pytest.mark.django_db(transaction=True)


# --- helpers: a dead Redis -------------------------------------


@pytest.fixture
def take_redis_down(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Call it to point every module of the project that holds ``get_redis`` at
    a port nothing listens on (the Django cache, sessions and tokens stay up)."""
    import sys

    import core.redis

    dead = redis_lib.Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.2, socket_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )

    def down() -> None:
        for name, module in list(sys.modules.items()):
            if (
                name.split(".")[0]
                in ("core", "audit", "insight", "accounts", "webhooks", "live", "notices", "messagecenter")
                and name != "core.redis"
            ):
                if getattr(module, "get_redis", None) is core.redis.get_redis:
                    monkeypatch.setattr(module, "get_redis", lambda: dead)

    return down


# --- with Redis unreachable ---------------------------------------------------------------


@pytest.fixture
def inbox_world(operator: Any, recipient: Any, other_recipient: Any, clock: Any) -> dict[str, str]:
    """alice's inbox, built with Redis up: a push message, a pull message to
    everyone, a bulletin, a notification; one read, one hidden, one seen mark."""
    group = make_group("ops", recipient)
    services.message_type_create(code="alert", name="Alert", category="transaction")
    services.subscription_create(message_type="alert", scope="WH1", group_id=group.pk)
    refs = {}
    refs["push"] = send(operator, to={"users": [recipient]}, category="promotion", title="Sale").ref
    clock.advance(seconds=1)
    refs["pull"] = send(operator, to={"everyone": True}, title="For all", link="https://example.com/a").ref
    clock.advance(seconds=1)
    refs["bulletin"] = services.bulletin_create(
        title="Maintenance", body_html="<p>Tonight</p>", display_time=clock.now, group_ids=[group.pk]
    ).ref
    clock.advance(seconds=1)
    refs["notification"] = services.notification_send(
        message_type="alert", scope="WH1", title="Stock low", body_html="<p>A-01</p>"
    ).ref
    clock.advance(seconds=1)
    refs["hidden"] = send(operator, to={"users": [recipient]}, title="Gone soon").ref
    services.inbox_mark_read(user=recipient, item_id=refs["pull"])
    services.inbox_hide(user=recipient, item_id=refs["hidden"])
    clock.advance(seconds=1)
    services.inbox_mark_seen(user=recipient)
    clock.advance(seconds=1)
    refs["after_seen"] = send(operator, to={"users": [recipient]}, category="interaction", title="Reply").ref
    return refs


def test_api_answers_from_postgres_with_redis_down(
    inbox_world: dict[str, str], recipient: Any, outsider: Any, take_redis_down: Callable[[], None]
) -> None:
    client = client_for(recipient)
    up_list = client.get("/api/v1/inbox/").json()
    up_counts = client.get("/api/v1/inbox/counts/").json()
    up_item = client.get(f"/api/v1/inbox/{inbox_world['bulletin']}/").json()

    take_redis_down()
    listing = client.get("/api/v1/inbox/")
    assert listing.status_code == 200
    assert listing.json() == up_list
    refs = inbox_world
    assert [(i["id"], i["read"]) for i in listing.json()["results"]] == [
        (refs["after_seen"], False),
        (refs["notification"], False),
        (refs["bulletin"], False),
        (refs["pull"], True),
        (refs["push"], False),
    ]
    assert listing.json()["unread_count"] == 4
    assert listing.json()["unseen_count"] == 1
    counts = client.get("/api/v1/inbox/counts/")
    assert counts.status_code == 200
    assert counts.json() == up_counts
    assert counts.json()["by_category"] == {
        "system": 1,
        "promotion": 1,
        "transaction": 1,
        "interaction": 1,
        "announcement": 0,
    }
    item = client.get(f"/api/v1/inbox/{refs['bulletin']}/")
    assert item.status_code == 200
    assert item.json() == up_item
    assert item.json()["body_html"] == "<p>Tonight</p>"
    assert client.get(f"/api/v1/inbox/{refs['pull']}/").json()["link"] == "https://example.com/a"
    assert_error(client.get(f"/api/v1/inbox/{refs['hidden']}/"), 404, "not_found")
    assert_error(client.get("/api/v1/inbox/m999999/"), 404, "not_found")
    assert_error(client_for(outsider).get(f"/api/v1/inbox/{refs['push']}/"), 404, "not_found")
    only = client.get("/api/v1/inbox/", {"category": "promotion"}).json()["results"]
    assert [i["id"] for i in only] == [refs["push"]]
    assert_error(client.get("/api/v1/inbox/", {"category": "nope"}), 400, "invalid_category")
    assert_error(client.get("/api/v1/inbox/", {"cursor": "garbage"}), 400, "invalid_cursor")


def test_marks_made_while_redis_is_down_show_at_once(
    inbox_world: dict[str, str], recipient: Any, clock: Any, take_redis_down: Callable[[], None]
) -> None:
    refs = inbox_world
    take_redis_down()
    services.inbox_mark_read(user=recipient, item_id=refs["push"])
    services.inbox_mark_unread(user=recipient, item_id=refs["pull"])
    assert services.inbox_mark_all_read(user=recipient, category="transaction") == 1
    services.inbox_mark_seen(user=recipient)
    services.inbox_hide(user=recipient, item_id=refs["bulletin"])
    # Committed in PostgreSQL; each left the user's part in Redis stale.
    assert OutboxEntry.objects.filter(user_id=recipient.pk).count() == 5

    client = client_for(recipient)
    body = client.get("/api/v1/inbox/").json()
    assert [(i["id"], i["read"]) for i in body["results"]] == [
        (refs["after_seen"], False),
        (refs["notification"], True),
        (refs["pull"], False),
        (refs["push"], True),
    ]
    assert (body["unread_count"], body["unseen_count"]) == (2, 0)
    unread = client.get("/api/v1/inbox/", {"unread": "true"}).json()["results"]
    assert [i["id"] for i in unread] == [refs["after_seen"], refs["pull"]]
    assert client.get("/api/v1/inbox/counts/").json()["unread"] == 2
    assert_error(client.get(f"/api/v1/inbox/{refs['bulletin']}/"), 404, "not_found")
    now = clock.now
    assert [e.ref for e in fallback.inbox_unread_entries(user_id=recipient.pk, category=None, now=now)] == [
        refs["after_seen"],
        refs["pull"],
    ]
    assert fallback.inbox_item_live(user_id=recipient.pk, ref=refs["push"], now=now) is True
    assert fallback.inbox_item_live(user_id=recipient.pk, ref=refs["bulletin"], now=now) is False


def test_cursor_walk_crosses_from_redis_to_postgres(
    operator: Any, recipient: Any, clock: Any, take_redis_down: Callable[[], None]
) -> None:
    # Equal scores on a page boundary: the position carries a skip count.
    sent = []
    for i in range(7):
        if i % 3 == 0:
            clock.advance(seconds=1)
        sent.append(send(operator, to={"users": [recipient]}, title=f"item-{i}").ref)
    client = client_for(recipient)
    up = client.get("/api/v1/inbox/", {"limit": 2}).json()
    everything = [i["id"] for i in client.get("/api/v1/inbox/", {"limit": 50}).json()["results"]]
    take_redis_down()
    got = [i["id"] for i in up["results"]]
    cursor = up["next_cursor"]
    while cursor:
        body = client.get("/api/v1/inbox/", {"limit": 2, "cursor": cursor}).json()
        got += [i["id"] for i in body["results"]]
        cursor = body["next_cursor"]
    assert got == everything
    assert sorted(got) == sorted(sent)


def test_pages_render_from_postgres_with_redis_down(
    inbox_world: dict[str, str], recipient: Any, take_redis_down: Callable[[], None]
) -> None:
    browser = Client()
    browser.force_login(recipient)
    assert "Live updates paused" not in browser.get("/inbox/").content.decode()
    take_redis_down()
    response = browser.get("/inbox/")
    html = response.content.decode()
    assert response.status_code == 200
    for title in ("Sale", "For all", "Maintenance", "Stock low", "Reply"):
        assert title in html
    assert "Gone soon" not in html
    assert "Live updates paused" in html
    # The counts the page shows come from PostgreSQL as well.
    assert '<span class="mc-count" data-count="total:">4</span>' in html
    assert '<span class="mc-count" data-count="category:transaction">1</span>' in html
    assert browser.get("/inbox/?category=transaction&unread=true").status_code == 200
    item = browser.get(f"/inbox/{inbox_world['notification']}/")
    assert item.status_code == 200
    assert "Stock low" in item.content.decode()
    assert browser.get(f"/inbox/{inbox_world['hidden']}/").status_code == 404


def test_fallback_runs_a_fixed_number_of_queries(
    django_assert_max_num_queries: Any, operator: Any, recipient: Any, clock: Any
) -> None:
    group = make_group("ops", recipient)
    services.message_type_create(code="alert", name="Alert")
    services.subscription_create(message_type="alert", scope="WH1", user_id=recipient.pk)

    def add_items(count: int) -> None:
        for i in range(count):
            clock.advance(seconds=1)
            send(operator, to={"users": [recipient]}, title=f"push-{i}", images=["https://example.com/i.png"])
            send(operator, to={"everyone": True}, title=f"pull-{i}")
            services.bulletin_create(title=f"b-{i}", body_html="", display_time=clock.now, group_ids=[group.pk])
            services.notification_send(message_type="alert", scope="WH1", title=f"n-{i}", body_html="")

    for count in (1, 12):
        add_items(count)
        now = clock.now
        # The user's own rows (one statement: hidden refs, mute periods, read
        # months, seen, groups...), item states, three candidate scans, then
        # details: messages (+ their images), bulletins, notifications.
        with django_assert_max_num_queries(9):
            page = fallback.inbox_page(user_id=recipient.pk, now=now, **whole_inbox(20))
        assert {row.detail["kind"] for row in page.rows} == {"message", "bulletin", "notification"}
        # The counts and one item read the same rows as a page, item states and mute periods included.
        with django_assert_max_num_queries(5):
            fallback.inbox_counts(user_id=recipient.pk, now=now)
        with django_assert_max_num_queries(7):
            assert fallback.inbox_get(user_id=recipient.pk, ref=page.rows[0].ref, now=now) is not None


@pytest.mark.django_db(transaction=True)
def test_grouped_items_cost_no_query_more_whatever_their_number(
    django_assert_max_num_queries: Any, operator: Any, recipient: Any, clock: Any
) -> None:
    """The user's group ends come with their other rows; a key's listing
    reads what a page reads."""
    for count in (1, 12):
        for i in range(count):
            clock.advance(seconds=1)
            for key in ("order:1", "order:2"):
                send(operator, to={"users": [recipient]}, title=f"{key}-{i}", group_key=key, actor=f"a{i}")
            send(operator, to={"everyone": True}, title=f"pull-{i}", group_key="news")
        newest = Message.objects.filter(group_key="order:1").order_by("-pk")[0]
        services.inbox_mark_read(user=recipient, item_id=newest.ref)
        now = clock.now
        with django_assert_max_num_queries(7):
            page = fallback.inbox_page(user_id=recipient.pk, now=now, **whole_inbox(20))
        # Rows at the newest time (news, order:2, order:1), then the first read order:1 row.
        newest_rows = {(row.group["key"], row.group["count"]) for row in page.rows[:3] if row.group}
        assert newest_rows == (
            {("news", 1), ("order:2", 1), ("order:1", 1)}
            if count == 1
            else {("news", 13), ("order:2", 13), ("order:1", 12)}
        )
        # Equal times list by member, descending, as strings: "m10|" sorts before "m9|" (ids
        # depend on what ran before in this database, so the order of the three is derived).
        assert len({row.score for row in page.rows[:3]}) == 1
        refs = [row.ref for row in page.rows[:3]]
        assert refs == sorted(refs, key=lambda ref: ref + "|", reverse=True)
        rest = [(row.group["key"], row.group["count"]) for row in page.rows[3:] if row.group]
        assert rest == ([] if count == 1 else [("order:1", 1)])
        with django_assert_max_num_queries(5):
            fallback.inbox_counts(user_id=recipient.pk, now=now)
        # The user's own rows (group ends among them), state rows, three
        # scans: 5; then a message's detail and its images.
        with django_assert_max_num_queries(7):
            assert fallback.inbox_get(user_id=recipient.pk, ref=page.rows[0].ref, now=now) is not None
        with django_assert_max_num_queries(7):
            rows, _ = fallback.inbox_group_page(
                user_id=recipient.pk, group_key="order:2", now=now, max_score=None, skip=0, limit=20
            )
        assert len(rows) == (1 if count == 1 else 13)


def test_fallback_keeps_the_newest_max_items(
    operator: Any, recipient: Any, clock: Any, settings: Any, take_redis_down: Callable[[], None]
) -> None:
    settings.MESSAGECENTER_INBOX_MAX_ITEMS = 3
    sent = []
    for i in range(5):
        clock.advance(seconds=1)
        sent.append(send(operator, to={"users": [recipient]} if i % 2 else {"everyone": True}, title=f"i{i}").ref)
    client = client_for(recipient)
    up = client.get("/api/v1/inbox/").json()
    take_redis_down()
    down = client.get("/api/v1/inbox/").json()
    assert [i["id"] for i in down["results"]] == sent[:1:-1]
    assert down == up
    assert_error(client.get(f"/api/v1/inbox/{sent[0]}/"), 404, "not_found")


def test_fallback_scan_of_pull_messages_is_bounded(operator: Any, recipient: Any, clock: Any, settings: Any) -> None:
    settings.MESSAGECENTER_FALLBACK_SCAN_LIMIT = 2
    for i in range(4):
        clock.advance(seconds=1)
        send(operator, to={"everyone": True}, title=f"i{i}")
    assert set(Message.objects.values_list("delivery", flat=True)) == {DeliveryMode.PULL}
    refs = [e.ref for e in fallback.inbox_unread_entries(user_id=recipient.pk, category=None, now=clock.now)]
    assert refs == [m.ref for m in Message.objects.order_by("-created_at")[:2]]


def test_fallback_scan_reads_page_after_page_up_to_its_bound(
    operator: Any, recipient: Any, clock: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fallback, "SCAN_PAGE", 2)
    for i in range(5):
        clock.advance(seconds=1)
        send(operator, to={"everyone": True}, title=f"i{i}")
    newest = [m.ref for m in Message.objects.order_by("-created_at")]
    for bound, seen in ((5000, 5), (3, 3), (4, 4)):
        settings.MESSAGECENTER_FALLBACK_SCAN_LIMIT = bound
        refs = [e.ref for e in fallback.inbox_unread_entries(user_id=recipient.pk, category=None, now=clock.now)]
        assert refs == newest[:seen]


def test_fallback_finds_pushed_items_by_their_recipient_rows_whatever_else_was_sent(
    operator: Any, recipient: Any, other_recipient: Any, clock: Any, settings: Any, take_redis_down: Callable[[], None]
) -> None:
    """The scan bound is for pull messages and bulletins: the items pushed to the
    user are read by the user's own rows, so other users' newer items hide none."""
    settings.MESSAGECENTER_FALLBACK_SCAN_LIMIT = 2
    mine = send(operator, to={"users": [recipient]}, title="mine")
    for i in range(3):
        clock.advance(seconds=1)
        send(operator, to={"users": [other_recipient]}, title=f"theirs {i}")
    assert Message.objects.get(pk=mine.pk).delivery == DeliveryMode.PUSH
    client = client_for(recipient)
    up = client.get("/api/v1/inbox/").json()
    take_redis_down()
    down = client.get("/api/v1/inbox/").json()
    assert [i["id"] for i in down["results"]] == [mine.ref]
    assert down == up


def test_item_expiry_and_retraction_from_postgres(
    operator: Any, recipient: Any, clock: Any, take_redis_down: Callable[[], None]
) -> None:
    expiring = send(operator, to={"users": [recipient]}, title="short", expire_at=clock.now + timedelta(minutes=5))
    retracted = send(operator, to={"everyone": True}, title="oops")
    services.message_retract(message=retracted)
    take_redis_down()
    client = client_for(recipient)
    assert [i["id"] for i in client.get("/api/v1/inbox/").json()["results"]] == [expiring.ref]
    clock.advance(minutes=5)
    assert client.get("/api/v1/inbox/").json()["results"] == []
    assert client.get("/api/v1/inbox/counts/").json()["unread"] == 0


def test_a_backdated_bulletin_created_while_muted_is_hidden_on_both_paths(
    recipient: Any, clock: Any, take_redis_down: Callable[[], None]
) -> None:
    """It arrives when created, not at its (earlier) display time: both paths hide it."""
    client = client_for(recipient)
    services.bulletin_create(title="Before", body_html="x", display_time=clock.now - timedelta(days=2), group_ids=[])
    clock.advance(seconds=1)
    services.preferences_update(user=recipient, muted_categories=["system"], muted_message_types=None)
    clock.advance(seconds=1)
    services.bulletin_create(title="Backdated", body_html="x", display_time=clock.now - timedelta(days=1), group_ids=[])
    up = client.get("/api/v1/inbox/").json()
    assert [i["title"] for i in up["results"]] == ["Before"]
    assert up["unread_count"] == 1
    take_redis_down()
    assert client.get("/api/v1/inbox/").json() == up


def test_uploaded_images_read_the_same_from_postgres_redis_and_the_drift_check(
    operator: Any, recipient: Any, clock: Any, settings: Any
) -> None:
    """A message's uploaded image files (read a query for all the messages a
    page, a rebuild or a check builds) show in the fallback as in Redis, the
    drift check finds the detail equal, and an edit's new detail keeps them."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from durability.drift import check_run
    from messagecenter.models import Message
    from messagecenter.readmodel import inbox as inbox_rm
    from messagecenter.readmodel import to_ms
    from messagecenter.readmodel.inbox import Page

    uploads = [SimpleUploadedFile(f"{name}.png", b"\x89PNG\r\n", content_type="image/png") for name in "ab"]
    pictured = services.message_send(
        sender=operator,
        category="system",
        title="Pictures",
        body_html="<p>x</p>",
        images=["https://example.com/linked.png"],
        image_files=uploads,
        user_ids=[recipient.pk],
    )
    clock.advance(seconds=1)
    send(operator, to={"users": [recipient]}, title="Plain")

    def images() -> tuple[list[str], list[str]]:
        now = clock.now
        cached = inbox_rm.inbox_page(user_id=recipient.pk, now_ms=to_ms(now), **whole_inbox(20))
        assert isinstance(cached, Page)
        computed = fallback.inbox_page(user_id=recipient.pk, now=now, **whole_inbox(20))
        assert [row.ref for row in cached.rows] == [row.ref for row in computed.rows]
        assert [row.detail["images"] for row in cached.rows] == [row.detail["images"] for row in computed.rows]
        return cached.rows[1].detail["images"], cached.rows[0].detail["images"]

    shown, plain = images()
    assert shown[0] == "https://example.com/linked.png"
    assert [url.rsplit("/", 1)[-1][:1] for url in shown[1:]] == ["a", "b"]  # the uploads, in their order
    assert plain == []
    assert check_run(repair=False, areas=["item_details"]).drift_count == 0

    message = Message.objects.get(pk=pictured.pk)
    message.title = "Pictures, renamed"
    message.save()
    assert images()[0] == shown
    assert check_run(repair=False, areas=["item_details"]).drift_count == 0
