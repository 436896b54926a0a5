"""Every write a user is told succeeded is in PostgreSQL before the answer.

A user acts through the API (marks, "read all", seen, archive, unarchive,
snooze, delete, bulk actions, preferences, an announcement read) while no
after-commit callback runs: the app process dies right after each commit,
before Redis hears of any of it. Then the private redis-server is flushed
and the process's own memory dropped (a restart). The user's very first
reads must show every acknowledged write (answered from PostgreSQL while the
read model is rebuilt), and so must Redis once it is rebuilt.
"""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from core.local_cache import local_caches_clear
from durability import healing, outbox, rebuild
from messagecenter import services as mc_services
from messagecenter.models import InboxReadMonth, InboxSeen, Message
from messagecenter.selectors import inbox_list
from notices.models import AnnouncementRead
from tests.conftest import client_for
from tests.faults.conftest import RedisServer, wait_healer
from tests.notices.conftest import announce

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis_server]


def _send(operator: Any, recipient: Any, title: str, category: str = "system") -> str:
    message = mc_services.message_send(
        sender=operator, category=category, title=title, body_html="<p>m</p>", user_ids=[recipient.pk]
    )
    return Message.objects.get(pk=message.pk).ref


def _die_after_each_commit(monkeypatch: pytest.MonkeyPatch) -> list[Callable[[], object]]:
    """No after-commit work runs (the process is gone by then); returns what was dropped."""
    dropped: list[Callable[[], object]] = []
    monkeypatch.setattr(transaction, "on_commit", lambda func, *_args, **_options: dropped.append(func))
    return dropped


def _state(client: Any) -> dict[str, Any]:
    """Everything the user can see of their writes, through the API."""
    listed = client.get("/api/v1/inbox/").json()
    archived = client.get("/api/v1/inbox/?archived=true").json()
    counts = client.get("/api/v1/inbox/counts/").json()
    announcements = client.get("/api/v1/announcements/").json()["results"]
    preferences = client.get("/api/v1/me/preferences/").json()
    return {
        # By id: items sent within one millisecond may list in either order.
        "list": {item["id"]: item["read"] for item in listed["results"]},
        "archived": {item["id"]: item["read"] for item in archived["results"]},
        "unseen": counts["unseen"],
        "unread": counts["unread"],
        "announcements": {str(item["id"]): item["read"] for item in announcements},
        "muted": preferences["muted_categories"],
    }


def test_acknowledged_writes_survive_a_kill_and_a_flushall_at_once(
    healing_on: RedisServer, operator: Any, recipient: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = [_send(operator, recipient, f"m{i}") for i in range(10)]
    promo = [_send(operator, recipient, f"p{i}", category="promotion") for i in range(2)]
    pulled = Message.objects.get(
        pk=mc_services.message_send(sender=operator, category="system", title="all", body_html="", everyone=True).pk
    ).ref
    announcement = announce(["user"], publish_at=timezone.now() - timedelta(hours=1))
    assert rebuild.rebuild() is not None
    user = client_for(recipient)
    assert len(_state(user)["list"]) == 13  # the pull item merged, everything in Redis

    # Writes whose Redis half ran: Redis is flushed below, so they too must come back from PostgreSQL.
    acknowledged = [
        user.post(f"/api/v1/inbox/{m[0]}/read/"),
        user.post(f"/api/v1/inbox/{m[1]}/read/"),
        user.post(f"/api/v1/inbox/{m[1]}/unread/"),
        user.post(f"/api/v1/inbox/{m[2]}/read/"),
        user.post(f"/api/v1/inbox/{m[2]}/archive/"),
        user.post(f"/api/v1/inbox/{m[3]}/archive/"),
        user.post(f"/api/v1/inbox/{m[3]}/unarchive/"),
    ]
    # The writes in flight when every process is killed: answered, their Redis half never ran.
    dropped = _die_after_each_commit(monkeypatch)
    until = (timezone.now() + timedelta(hours=1)).isoformat()
    acknowledged += [
        user.post("/api/v1/inbox/read-all/", {"category": "promotion"}, format="json"),
        user.post("/api/v1/inbox/seen/"),
        user.post(f"/api/v1/inbox/{m[4]}/snooze/", {"until": until}, format="json"),
        user.delete(f"/api/v1/inbox/{m[5]}/"),
        user.post("/api/v1/inbox/bulk/", {"action": "read", "ids": [m[6], pulled]}, format="json"),
        user.post("/api/v1/inbox/bulk/", {"action": "delete", "ids": [m[7]]}, format="json"),
        user.post(f"/api/v1/inbox/{m[8]}/read/"),
        user.post(f"/api/v1/inbox/{m[9]}/archive/"),
        user.post(f"/api/v1/announcements/{announcement.pk}/read/"),
        user.put("/api/v1/me/preferences/", {"muted_categories": ["interaction"], "muted_message_types": []}, "json"),
    ]
    assert [r.status_code for r in acknowledged] == [*[204] * 7, 200, *[204] * 3, 200, 200, 204, 204, 204, 200]
    assert acknowledged[7].json() == {"marked": 2}
    assert dropped  # Redis heard of none of those
    expected = {
        "list": {
            pulled: True,
            promo[1]: True,
            promo[0]: True,
            m[8]: True,
            m[6]: True,
            m[3]: False,
            m[1]: False,
            m[0]: True,
        },
        "archived": {m[2]: True, m[9]: False},
        "unseen": 0,
        "unread": 2,
        "announcements": {str(announcement.pk): True},
        "muted": ["interaction"],
    }

    # The same moment: Redis loses everything; the app starts again with nothing in memory.
    healing_on.client().flushall()
    monkeypatch.undo()
    healing.forget()
    outbox.forget_local_state()
    local_caches_clear()

    assert _state(user) == expected  # the first read: PostgreSQL while Redis is rebuilt
    wait_healer()
    assert inbox_list(user=recipient, limit=50).degraded is False
    assert _state(user) == expected  # and Redis, rebuilt from it
    # A user's read state costs a row per month acted in and one watermark row.
    assert InboxReadMonth.objects.filter(user=recipient).count() == 1
    assert InboxSeen.objects.filter(user=recipient).count() == 1
    assert AnnouncementRead.objects.filter(user=recipient).count() == 1


def test_a_mark_is_not_acknowledged_when_postgresql_refuses_it(
    healing_on: RedisServer, operator: Any, recipient: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = _send(operator, recipient, "m")
    assert rebuild.rebuild() is not None
    user = client_for(recipient)
    assert _state(user)["list"] == {ref: False}

    from django.db import DatabaseError

    from messagecenter.services import inbox as inbox_services

    def refuse(**_kwargs: Any) -> int:
        raise DatabaseError("disk full")

    monkeypatch.setattr(inbox_services, "read_marks_commit", refuse)
    user.raise_request_exception = False
    assert user.post(f"/api/v1/inbox/{ref}/read/").status_code >= 500
    monkeypatch.undo()
    # Neither PostgreSQL nor Redis took it: the user was not told it succeeded, and it did not.
    assert _state(user)["list"] == {ref: False}
    healing_on.client().flushall()
    healing.forget()
    assert _state(user)["list"] == {ref: False}
