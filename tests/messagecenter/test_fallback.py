"""Degraded reads: the inbox answered from PostgreSQL alone (``messagecenter.fallback``).

The property test applies random sequences of operations through the normal
services with Redis up, runs the read-state snapshot job now and then, and
notes every later mark as the pending outbox entry the degraded write path
would have enqueued; at any point the fallback (snapshot plus those entries)
must give the Redis path's pages (walked by cursor), counts and single items.
The other tests make Redis unreachable and check the API and the pages.
"""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import redis as redis_lib
from django.conf import settings as django_settings
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)
from redis.backoff import NoBackoff
from redis.retry import Retry

from core.exceptions import NotFound
from core.models import OutboxEntry
from core.redis import keyspace_flush
from messagecenter import fallback, services
from messagecenter.models import (
    CATEGORIES,
    Bulletin,
    InboxHidden,
    InboxReadSnapshot,
    InboxSeenSnapshot,
    ItemSlotMonth,
    Message,
    MessageStatus,
    MessageType,
    Notification,
    Subscription,
    UserGroup,
)
from messagecenter.readmodel import inbox, to_ms
from messagecenter.readmodel.inbox import Page
from messagecenter.services.snapshots import inbox_read_snapshot
from tests.conftest import assert_error, client_for
from tests.factories import SuperuserFactory, UserFactory
from tests.messagecenter.conftest import make_group, send
from tests.messagecenter.test_stateful import CLOCK, DISPLAY, EXPIRY, START

pytestmark = pytest.mark.django_db


# --- helpers: snapshots, pending marks, a dead Redis -------------------------------------


def pending(user: Any, topic: str, **payload: Any) -> None:
    """The outbox entry a mark accepted while Redis is down leaves (the contract)."""
    OutboxEntry.objects.create(topic=topic, payload=payload, user_id=user.pk)


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
            if name.split(".")[0] in ("core", "notices", "messagecenter") and name != "core.redis":
                if getattr(module, "get_redis", None) is core.redis.get_redis:
                    monkeypatch.setattr(module, "get_redis", lambda: dead)

    return down


def walk(path: Callable[..., Page], **query: Any) -> list[Page]:
    """Every page of one listing, each asked for with the previous page's position."""
    pages: list[Page] = []
    position: tuple[int, int] | None = None
    while True:
        max_score, skip = position or (None, 0)
        page = path(max_score=max_score, skip=skip, **query)
        pages.append(page)
        if page.next_position is None:
            return pages
        position = page.next_position
        assert len(pages) < 200, "the walk does not end"


# --- the property: fallback == Redis ------------------------------------------------------

N_USERS = 3
READ_ALL = fallback.TOPIC_READ_ALL


class FallbackMachine(RuleBasedStateMachine):
    users: list[Any] = []
    operator: Any = None

    def __init__(self) -> None:
        super().__init__()
        # One example = one fresh world (rows of the message centre, Redis).
        for model in (
            Notification,
            Subscription,
            MessageType,
            Message,
            Bulletin,
            UserGroup,
            InboxHidden,
            InboxReadSnapshot,
            InboxSeenSnapshot,
            OutboxEntry,
            ItemSlotMonth,
        ):
            model.objects.all().delete()
        keyspace_flush()
        CLOCK.now = START
        self.groups: list[UserGroup] = []
        # Marks made since the last snapshot, as outbox entries (user id, topic, payload).
        # They become rows only while the fallback is asked: as rows they would
        # make the next mark replay them first (core.outbox.settle_user).
        self.marks: list[tuple[int, str, dict[str, Any]]] = []

    @initialize()
    def world(self) -> None:
        self.groups = [services.user_group_create(name=f"fb{i}") for i in range(2)]
        services.message_type_create(code="alert", name="Alert", category="system")
        services.message_type_create(code="deal", name="Deal", category="promotion")
        services.subscription_create(message_type="alert", scope="s", user_id=self.users[0].pk)
        services.subscription_create(message_type="alert", scope="s", group_id=self.groups[0].pk)
        services.subscription_create(message_type="deal", scope="s", user_id=self.users[1].pk)
        services.subscription_create(message_type="deal", scope="s", group_id=self.groups[1].pk)

    def _before_backdating(self) -> None:
        # "read all" pending in the outbox means "every item with score <= at_ms":
        # an item that appears later with an older score (a bulletin displayed in
        # the past, a group joined) is outside what the contract can tell, so the
        # snapshot job runs first, as it would once Redis is back.
        if any(topic == READ_ALL for _user, topic, _payload in self.marks):
            self.snapshot()

    # --- sources ------------------------------------------------------------------------

    @rule(
        users=st.sets(st.integers(0, N_USERS - 1), max_size=N_USERS),
        groups=st.sets(st.integers(0, 1), max_size=2),
        everyone=st.booleans(),
        category=st.sampled_from(CATEGORIES),
        expire_minutes=EXPIRY,
    )
    def send(
        self, users: set[int], groups: set[int], everyone: bool, category: str, expire_minutes: int | None
    ) -> None:
        user_ids = [self.users[i].pk for i in users]
        group_ids = [self.groups[i].pk for i in groups]
        services.message_send(
            sender=self.operator,
            category=category,
            title=f"m-{category}",
            body_html="<p>b</p>",
            link="https://example.com/x" if everyone else "",
            user_ids=user_ids,
            group_ids=group_ids,
            everyone=everyone or not (user_ids or group_ids),
            expire_at=timezone.now() + timedelta(minutes=expire_minutes) if expire_minutes else None,
        )

    @rule(groups=st.sets(st.integers(0, 1), max_size=2), display_minutes=DISPLAY, expire_minutes=EXPIRY)
    def bulletin(self, groups: set[int], display_minutes: int, expire_minutes: int | None) -> None:
        self._before_backdating()
        display = timezone.now() + timedelta(minutes=display_minutes)
        services.bulletin_create(
            title="b",
            body_html="<p>bulletin</p>",
            display_time=display,
            expire_at=display + timedelta(minutes=expire_minutes) if expire_minutes else None,
            group_ids=[self.groups[i].pk for i in groups],
        )

    @precondition(lambda self: Bulletin.objects.exists())
    @rule(data=st.data(), display_minutes=st.one_of(st.none(), DISPLAY))
    def edit_bulletin(self, data: Any, display_minutes: int | None) -> None:
        self._before_backdating()
        bulletin = data.draw(st.sampled_from(list(Bulletin.objects.order_by("pk"))))
        changes: dict[str, Any] = {"title": "edited"}
        if display_minutes is not None:
            changes["display_time"] = timezone.now() + timedelta(minutes=display_minutes)
            changes["expire_at"] = None
        services.bulletin_update(bulletin=bulletin, data=changes)

    @precondition(lambda self: Bulletin.objects.exists())
    @rule(data=st.data())
    def delete_bulletin(self, data: Any) -> None:
        services.bulletin_delete(bulletin=data.draw(st.sampled_from(list(Bulletin.objects.order_by("pk")))))

    @rule(code=st.sampled_from(["alert", "deal"]), ttl_minutes=st.sampled_from([5, 30, 60]))
    def notify(self, code: str, ttl_minutes: int) -> None:
        services.notification_send(
            message_type=code, scope="s", title=f"n-{code}", body_html="<p>n</p>", ttl_seconds=ttl_minutes * 60
        )

    @precondition(lambda self: Notification.objects.filter(withdrawn=False).exists())
    @rule(data=st.data())
    def withdraw(self, data: Any) -> None:
        notification = data.draw(st.sampled_from(list(Notification.objects.filter(withdrawn=False).order_by("pk"))))
        assert services.notification_withdraw(notification=notification) is True

    @precondition(lambda self: Message.objects.exclude(status=MessageStatus.RETRACTED).exists())
    @rule(data=st.data())
    def retract(self, data: Any) -> None:
        message = data.draw(
            st.sampled_from(list(Message.objects.exclude(status=MessageStatus.RETRACTED).order_by("pk")))
        )
        assert services.message_retract(message=message) is True

    @rule(user=st.integers(0, N_USERS - 1), group=st.integers(0, 1), join=st.booleans())
    def membership(self, user: int, group: int, join: bool) -> None:
        self._before_backdating()
        change = services.user_group_add_members if join else services.user_group_remove_members
        change(group=self.groups[group], user_ids=[self.users[user].pk])

    @rule(minutes=st.sampled_from([1, 5, 30]))
    def tick(self, minutes: int) -> None:
        CLOCK.now = CLOCK.now + timedelta(minutes=minutes)

    # --- the user's marks (recorded as pending until the next snapshot) -------------------

    def _pick_ref(self, data: Any) -> str:
        refs = [f"m{pk}" for pk in Message.objects.values_list("pk", flat=True)]
        refs += [f"b{pk}" for pk in Bulletin.objects.values_list("pk", flat=True)]
        refs += [f"n{pk}" for pk in Notification.objects.values_list("pk", flat=True)]
        return str(data.draw(st.sampled_from([*refs, "m999999"])))

    @rule(data=st.data(), user=st.integers(0, N_USERS - 1), read=st.booleans())
    def mark(self, data: Any, user: int, read: bool) -> None:
        who, ref = self.users[user], self._pick_ref(data)
        try:
            (services.inbox_mark_read if read else services.inbox_mark_unread)(user=who, item_id=ref)
        except NotFound:
            return
        self.marks.append((who.pk, fallback.TOPIC_READ, {"ref": ref, "read": read, "at_ms": to_ms(timezone.now())}))

    @rule(data=st.data(), user=st.integers(0, N_USERS - 1))
    def hide(self, data: Any, user: int) -> None:
        who, ref = self.users[user], self._pick_ref(data)
        try:
            services.inbox_hide(user=who, item_id=ref)
        except NotFound:
            return
        self.marks.append((who.pk, fallback.TOPIC_HIDE, {"ref": ref, "at_ms": to_ms(timezone.now())}))

    @rule(user=st.integers(0, N_USERS - 1), category=st.one_of(st.none(), st.sampled_from(CATEGORIES)))
    def read_all(self, user: int, category: str | None) -> None:
        who = self.users[user]
        services.inbox_mark_all_read(user=who, category=category)
        self.marks.append((who.pk, READ_ALL, {"category": category or "", "at_ms": to_ms(timezone.now())}))
        # Time passes: anything sent afterwards is newer than at_ms.
        CLOCK.now = CLOCK.now + timedelta(seconds=1)

    @rule(user=st.integers(0, N_USERS - 1))
    def seen(self, user: int) -> None:
        who = self.users[user]
        services.inbox_mark_seen(user=who)
        self.marks.append((who.pk, fallback.TOPIC_SEEN, {"at_ms": to_ms(timezone.now())}))

    @rule()
    def snapshot(self) -> None:
        inbox_read_snapshot()
        self.marks = []

    # --- the property -------------------------------------------------------------------

    @rule(data=st.data())
    def compare(self, data: Any) -> None:
        category = data.draw(st.one_of(st.none(), st.sampled_from(CATEGORIES)))
        unread_only = data.draw(st.booleans())
        since = data.draw(st.one_of(st.none(), st.sampled_from([10, 45])))
        self.check(category=category, unread_only=unread_only, since_minutes=since)

    def teardown(self) -> None:
        self.check(category=None, unread_only=True, since_minutes=None)

    def check(self, *, category: str | None, unread_only: bool, since_minutes: int | None) -> None:
        OutboxEntry.objects.bulk_create(
            OutboxEntry(user_id=user_id, topic=topic, payload=payload) for user_id, topic, payload in self.marks
        )
        try:
            self._check(category=category, unread_only=unread_only, since_minutes=since_minutes)
        finally:
            OutboxEntry.objects.all().delete()

    def _check(self, *, category: str | None, unread_only: bool, since_minutes: int | None) -> None:
        now = timezone.now()
        now_ms = to_ms(now)
        since_ms = to_ms(now - timedelta(minutes=since_minutes)) if since_minutes else None
        refs = [f"m{pk}" for pk in Message.objects.values_list("pk", flat=True)]
        refs += [f"b{pk}" for pk in Bulletin.objects.values_list("pk", flat=True)]
        refs += [f"n{pk}" for pk in Notification.objects.values_list("pk", flat=True)]
        for user in self.users:
            uid = user.pk

            def redis_path(uid: int = uid, **query: Any) -> Page:
                return inbox.inbox_page(user_id=uid, now_ms=now_ms, **query)

            def postgres_path(uid: int = uid, **query: Any) -> Page:
                return fallback.inbox_page(user_id=uid, now=now, **query)

            everything = walk(redis_path, category=None, unread_only=False, since_ms=None, limit=2)
            assert walk(postgres_path, category=None, unread_only=False, since_ms=None, limit=2) == everything
            query = {"category": category, "unread_only": unread_only, "since_ms": since_ms, "limit": 3}
            assert walk(postgres_path, **query) == walk(redis_path, **query), (user.username, query)
            assert fallback.inbox_counts(user_id=uid, now=now) == inbox.inbox_counts(user_id=uid, now_ms=now_ms)
            for ref in [*refs, "m999999", "x1", "m1|x"]:
                row = inbox.inbox_get(user_id=uid, ref=ref, now_ms=now_ms)
                assert fallback.inbox_get(user_id=uid, ref=ref, now=now) == row, (user.username, ref)
                assert fallback.inbox_item_live(user_id=uid, ref=ref, now=now) is (row is not None)
            rows = [row for page in everything for row in page.rows]
            for cat in (None, *CATEGORIES):
                assert fallback.inbox_unread_refs(user_id=uid, category=cat, now=now) == [
                    row.ref for row in rows if not row.read and cat in (None, row.detail["category"])
                ]


def test_fallback_answers_equal_the_redis_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timezone, "now", CLOCK)
    monkeypatch.setattr(django_settings, "MESSAGECENTER_PUSH_THRESHOLD", 2)
    monkeypatch.setattr(django_settings, "MESSAGECENTER_FANOUT_CHUNK", 2)
    FallbackMachine.users = [UserFactory(username=f"fb-user{i}") for i in range(N_USERS)]
    FallbackMachine.operator = SuperuserFactory(username="fb-operator")
    run_state_machine_as_test(
        FallbackMachine,
        settings=settings(
            max_examples=12,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )


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
    inbox_read_snapshot()
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


def test_pending_marks_show_while_redis_is_down(
    inbox_world: dict[str, str], recipient: Any, clock: Any, take_redis_down: Callable[[], None]
) -> None:
    refs = inbox_world
    take_redis_down()
    at_ms = to_ms(clock.now)
    pending(recipient, fallback.TOPIC_READ, ref=refs["push"], read=True, at_ms=at_ms)
    pending(recipient, fallback.TOPIC_READ, ref=refs["pull"], read=False, at_ms=at_ms)
    pending(recipient, fallback.TOPIC_READ_ALL, category="transaction", at_ms=at_ms)
    pending(recipient, fallback.TOPIC_SEEN, at_ms=at_ms)
    InboxHidden.objects.create(user=recipient, item_id=refs["bulletin"])
    pending(recipient, fallback.TOPIC_HIDE, ref=refs["bulletin"], at_ms=at_ms)
    # Someone else's marks and other topics change nothing here.
    OutboxEntry.objects.create(topic=fallback.TOPIC_READ_ALL, payload={"category": "", "at_ms": at_ms}, user_id=None)
    OutboxEntry.objects.create(topic="inbox.read", payload=["not", "a", "mark"], user_id=recipient.pk)
    OutboxEntry.objects.create(topic="inbox.read", payload={"read": True}, user_id=recipient.pk)

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
    assert fallback.inbox_unread_refs(user_id=recipient.pk, category=None, now=now) == [
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
    assert 'data-live-refresh="off"' in html
    assert 'aria-label="4 unread"' in html
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
            pending(recipient, fallback.TOPIC_READ, ref=f"m{i}", read=True, at_ms=to_ms(clock.now))
        inbox_read_snapshot()

    for count in (1, 12):
        add_items(count)
        now = clock.now
        # Hidden refs, pending marks, three candidate scans, snapshots, seen,
        # then details: messages (+ their images), bulletins, notifications.
        with django_assert_max_num_queries(11):
            page = fallback.inbox_page(
                user_id=recipient.pk,
                now=now,
                category=None,
                max_score=None,
                skip=0,
                limit=20,
                unread_only=False,
                since_ms=None,
            )
        assert {row.detail["kind"] for row in page.rows} == {"message", "bulletin", "notification"}
        with django_assert_max_num_queries(7):
            fallback.inbox_counts(user_id=recipient.pk, now=now)
        with django_assert_max_num_queries(8):
            assert fallback.inbox_get(user_id=recipient.pk, ref=page.rows[0].ref, now=now) is not None


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


def test_fallback_scan_is_bounded(operator: Any, recipient: Any, clock: Any, settings: Any) -> None:
    settings.MESSAGECENTER_FALLBACK_SCAN_LIMIT = 2
    for i in range(4):
        clock.advance(seconds=1)
        send(operator, to={"users": [recipient]}, title=f"i{i}")
    refs = fallback.inbox_unread_refs(user_id=recipient.pk, category=None, now=clock.now)
    assert refs == [m.ref for m in Message.objects.order_by("-created_at")[:2]]


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
