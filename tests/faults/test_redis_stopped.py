"""Redis stopped mid-run: a real redis-server is stopped while a client keeps
working, then restarted. No 5xx, every request fast (the breaker and short
timeouts), marks accepted and shown from PostgreSQL, nothing lost: after the
restart the outbox replay leaves Redis as the user left things."""

import time
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from core.breaker import reset_breakers
from core.local_cache import local_caches_clear
from durability import outbox
from durability.models import OutboxEntry
from messagecenter import services as mc_services
from messagecenter.models import Message
from notices import keys as notice_keys
from notices import readmodel
from notices.models import Announcement
from tests.conftest import client_for
from tests.faults.conftest import RedisServer
from tests.notices.conftest import announce

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis_server]

# A fault test, not a benchmark: generous, but far below a hang on a dead Redis
# (redis-py's defaults would take seconds per call, and an inbox request makes several).
PER_REQUEST_SECONDS = 1.5


class Session:
    """Sends requests, and checks each one: no 5xx, under the time bound."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.slowest = 0.0

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        started = time.monotonic()
        response = getattr(self.client, method)(path, **kwargs)
        elapsed = time.monotonic() - started
        self.slowest = max(self.slowest, elapsed)
        assert response.status_code < 500, (method, path, response.status_code, response.content[:300])
        assert elapsed < PER_REQUEST_SECONDS, (method, path, elapsed)
        return response

    def flags(self) -> dict[int, bool]:
        body = self.call("get", "/api/v1/announcements/").json()
        return {int(item["id"]): item["read"] for item in body["results"]}


def _live_announcement(**kwargs: Any) -> Announcement:
    return announce(["user"], publish_at=timezone.now() - timedelta(hours=1), **kwargs)


def _bits(announcements: list[Announcement], user_id: int) -> list[bool]:
    return [readmodel.read_bits(platform="user", announcement_id=a.pk, user_ids=[user_id])[0] for a in announcements]


def test_announcement_session_survives_a_redis_restart(
    redis_server: RedisServer, recipient: Any, operator: Any
) -> None:
    a1, a2 = _live_announcement(title="one"), _live_announcement(title="two")
    a3 = _live_announcement(title="pinned", pinned=True)
    user = Session(client_for(recipient))
    manager = Session(client_for(operator))
    assert user.call("post", f"/api/v1/announcements/{a1.pk}/read/").status_code == 204

    redis_server.stop(keep_data=True)

    assert user.call("get", "/healthz").json()["redis"] == "down"
    assert user.flags() == {a1.pk: True, a2.pk: False, a3.pk: False}
    assert user.call("get", "/api/v1/announcements/counts/").json() == {"read": 1, "unread": 2}
    for path in (f"{a2.pk}/read/", f"{a1.pk}/unread/", f"{a3.pk}/read/", f"{a3.pk}/unread/", f"{a3.pk}/read/"):
        assert user.call("post", f"/api/v1/announcements/{path}").status_code == 204
    assert user.call("post", "/api/v1/announcements/999999/read/").status_code == 404
    assert user.flags() == {a1.pk: False, a2.pk: True, a3.pk: True}
    assert user.call("get", f"/api/v1/announcements/{a2.pk}/").json()["read"] is True
    assert user.call("get", "/api/v1/announcements/counts/").json() == {"read": 2, "unread": 1}
    created = manager.call(
        "post",
        "/api/v1/manage/announcements/",
        data={"title": "during the outage", "body_html": "<p>b</p>", "platforms": ["user"]},
        format="json",
    )
    assert created.status_code == 201
    a4 = Announcement.objects.get(pk=int(created.json()["id"]))
    assert user.flags() == {a1.pk: False, a2.pk: True, a3.pk: True, a4.pk: False}
    pages = Client()
    pages.force_login(recipient)
    started = time.monotonic()
    page = pages.get("/announcements/")
    assert page.status_code == 200
    assert time.monotonic() - started < PER_REQUEST_SECONDS
    assert "during the outage" in page.content.decode()
    assert OutboxEntry.objects.filter(user_id=recipient.pk, topic="notices.read").count() == 5

    redis_server.start()
    reset_breakers()  # what the cooldown would do a few seconds later
    pending = outbox.pending_count()
    assert outbox.replay() == pending
    assert not OutboxEntry.objects.exists()

    assert user.call("get", "/healthz").json()["redis"] == "ok"
    assert _bits([a1, a2, a3, a4], recipient.pk) == [False, True, True, False]
    assert user.flags() == {a1.pk: False, a2.pk: True, a3.pk: True, a4.pk: False}
    assert user.call("get", "/api/v1/announcements/counts/").json() == {"read": 2, "unread": 2}


def test_announcement_changes_while_down_reach_redis_after_the_restart(
    redis_server: RedisServer, recipient: Any, operator: Any
) -> None:
    kept = _live_announcement(title="kept")
    ended = _live_announcement(title="ended")
    user = Session(client_for(recipient))
    manager = Session(client_for(operator))
    assert set(user.flags()) == {kept.pk, ended.pk}  # the index is built in Redis

    redis_server.stop(keep_data=True)
    created = manager.call(
        "post",
        "/api/v1/manage/announcements/",
        data={"title": "new", "body_html": "<p>b</p>", "platforms": ["user"]},
        format="json",
    ).json()
    ended_at = (timezone.now() - timedelta(minutes=1)).isoformat()
    assert (
        manager.call(
            "patch", f"/api/v1/manage/announcements/{ended.pk}/", data={"expire_at": ended_at}, format="json"
        ).status_code
        == 200
    )
    assert set(user.flags()) == {kept.pk, int(created["id"])}  # PostgreSQL's view
    assert set(OutboxEntry.objects.values_list("topic", flat=True)) == {"notices.platform_sync"}

    redis_server.start()
    reset_breakers()
    raw = redis_server.client()
    index = notice_keys.index("user", 0)
    assert raw.zscore(index, int(created["id"])) is None  # Redis came back with the old index
    assert outbox.replay() >= 1
    assert raw.zscore(index, int(created["id"])) is not None
    local_caches_clear()
    assert set(user.flags()) == {kept.pk, int(created["id"])}


def test_marks_made_while_down_are_replayed_into_a_redis_that_lost_everything(
    redis_server: RedisServer, recipient: Any
) -> None:
    a1, a2 = _live_announcement(), _live_announcement()
    user = Session(client_for(recipient))
    redis_server.stop()  # a crash: no dump, the new server starts empty
    user.call("post", f"/api/v1/announcements/{a2.pk}/read/")
    redis_server.start()
    reset_breakers()
    assert outbox.replay() == 1
    assert _bits([a1, a2], recipient.pk) == [False, True]
    assert user.flags() == {a1.pk: False, a2.pk: True}


def test_a_hung_redis_costs_a_fraction_of_a_second_per_request(redis_server: RedisServer, recipient: Any) -> None:
    a1 = _live_announcement()
    user = Session(client_for(recipient))
    assert user.flags() == {a1.pk: False}
    redis_server.freeze()  # accepts connections, never answers: every call would wait for its timeout
    try:
        started = time.monotonic()
        for i in range(5):
            action = "read" if i % 2 == 0 else "unread"
            assert user.call("post", f"/api/v1/announcements/{a1.pk}/{action}/").status_code == 204
            assert user.flags() == {a1.pk: action == "read"}
        # The first call pays a socket timeout, then the breaker fails the rest fast.
        assert time.monotonic() - started < 3 * PER_REQUEST_SECONDS
    finally:
        redis_server.thaw()
    reset_breakers()
    assert outbox.replay() == 5
    assert _bits([a1], recipient.pk) == [True]


# --- The inbox ---------------------------------------------------------------------


def _inbox(session: Session) -> dict[str, bool]:
    body = session.call("get", "/api/v1/inbox/").json()
    return {item["id"]: item["read"] for item in body["results"]}


def test_inbox_session_survives_a_redis_restart(redis_server: RedisServer, recipient: Any, operator: Any) -> None:
    now = timezone.now()
    bulletin = mc_services.bulletin_create(title="bulletin", body_html="<p>b</p>", display_time=now)
    sent = mc_services.message_send(
        sender=operator, category="system", title="message", body_html="<p>m</p>", user_ids=[recipient.pk]
    )
    message = Message.objects.get(pk=sent.pk)
    b, m = f"b{bulletin.pk}", f"m{message.pk}"
    user = Session(client_for(recipient))
    assert _inbox(user) == {b: False, m: False}
    assert user.call("post", f"/api/v1/inbox/{m}/read/").status_code == 204

    redis_server.stop(keep_data=True)

    assert user.call("get", "/healthz").json()["redis"] == "down"
    assert _inbox(user) == {b: False, m: True}
    assert user.call("post", f"/api/v1/inbox/{b}/read/").status_code == 204
    assert user.call("post", f"/api/v1/inbox/{m}/unread/").status_code == 204
    assert user.call("post", "/api/v1/inbox/m999999/read/").status_code == 404
    assert _inbox(user) == {b: True, m: False}
    assert user.call("post", "/api/v1/inbox/read-all/").json() == {"marked": 1}
    assert user.call("post", f"/api/v1/inbox/{b}/unread/").status_code == 204
    assert user.call("delete", f"/api/v1/inbox/{b}/").status_code == 204
    assert user.call("post", "/api/v1/inbox/seen/").status_code == 204
    assert _inbox(user) == {m: True}
    counts = user.call("get", "/api/v1/inbox/counts/").json()
    assert (counts["unread"], counts["unseen"]) == (0, 0)
    assert OutboxEntry.objects.filter(user_id=recipient.pk).count() == 6

    redis_server.start()
    reset_breakers()
    assert outbox.replay() == 6
    assert not OutboxEntry.objects.exists()
    body = user.call("get", "/api/v1/inbox/").json()
    assert {item["id"]: item["read"] for item in body["results"]} == {m: True}
    assert (body["unread_count"], body["unseen_count"]) == (0, 0)
