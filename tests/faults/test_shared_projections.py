"""What users share, written by a process that dies between its commit and
its Redis half: the change is recorded in its own transaction and the outbox
replay brings Redis up to date once the record's grace has passed.

The process "dies" by dropping every after-commit callback of its
transaction; Redis keeps its data. Without the record, the bulletin and the
memberships below would stay missing from Redis until someone compared the
two stores.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from core.redis import get_redis
from durability import outbox, rebuild
from durability.models import OutboxEntry
from durability.projection import UNRUN_GRACE, UNRUN_TOPIC
from messagecenter import keys as mc_keys
from messagecenter import services
from messagecenter.models import Message, UserGroupMembership
from messagecenter.readmodel import responses as responses_rm
from tests.conftest import client_for
from tests.factories import UserFactory
from tests.messagecenter.conftest import Clock, make_group

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def _dying(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with monkeypatch.context() as patched:
        patched.setattr(transaction, "on_commit", lambda func, *_a, **_k: None)
        yield


def _titles(user: Any) -> list[str]:
    return [item["title"] for item in client_for(user).get("/api/v1/inbox/").json()["results"]]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    now = Clock(timezone.now())
    monkeypatch.setattr(timezone, "now", now)
    return now


def _after_the_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    later = timezone.now() + UNRUN_GRACE + timedelta(seconds=1)
    monkeypatch.setattr(timezone, "now", lambda: later)


def test_a_bulletin_whose_process_died_after_its_commit_is_replayed(
    recipient: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _titles(recipient) == []
    with _dying(monkeypatch):
        services.bulletin_create(title="Maintenance", body_html="x", display_time=timezone.now())
    assert OutboxEntry.objects.filter(topic=UNRUN_TOPIC).count() == 1
    assert _titles(recipient) == []  # Redis never heard of it
    assert outbox.replay() == 0  # its own process might still be at work
    _after_the_grace(monkeypatch)
    assert outbox.replay() == 1
    assert _titles(recipient) == ["Maintenance"]
    assert not OutboxEntry.objects.exists()


@pytest.fixture(params=["healing off", pytest.param("healing on", marks=pytest.mark.redis_server)])
def healing_mode(request: pytest.FixtureRequest) -> str:
    """With self-healing off every user counts as held; with it on, the users
    whose part a read filled (on a private redis-server)."""
    if request.param == "healing on":
        request.getfixturevalue("healing_on")
        assert rebuild.rebuild() is not None
    return str(request.param)


@pytest.mark.usefixtures("healing_mode")
def test_memberships_a_dead_process_left_out_are_mended_by_their_area(
    recipient: Any, other_recipient: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two users join a group in one transaction, one signal each: the record
    holds the first user and is marked incomplete by the second, so the
    replay checks every held user's group set and mends both."""
    group = make_group("staff")
    services.bulletin_create(title="Staff only", body_html="x", display_time=timezone.now(), group_ids=[group.pk])
    bystander = UserFactory(username="carol")
    assert _titles(recipient) == _titles(other_recipient) == _titles(bystander) == []
    with _dying(monkeypatch), transaction.atomic():
        UserGroupMembership.objects.create(user=recipient, group=group)
        UserGroupMembership.objects.create(user=other_recipient, group=group)
    [record] = OutboxEntry.objects.filter(topic=UNRUN_TOPIC).values_list("payload", flat=True)
    assert record["keys"] == [recipient.pk]
    assert record["complete"] is False
    assert _titles(recipient) == _titles(other_recipient) == []
    _after_the_grace(monkeypatch)
    assert outbox.replay() == 1
    assert _titles(recipient) == _titles(other_recipient) == ["Staff only"]
    assert _titles(bystander) == []


# --- an operator's writes to users' own parts -----------------------------------------------


def _records() -> dict[str, dict[str, Any]]:
    payloads = OutboxEntry.objects.filter(topic=UNRUN_TOPIC).values_list("payload", flat=True)
    return {payload["name"]: payload for payload in payloads}


def test_a_bulletin_moved_later_by_a_dying_process_frees_the_archived_copies(
    recipient: Any, other_recipient: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Moving a bulletin to show later drops what users did with its earlier
    showing. No note of theirs covers the operator's write, so their item
    places are recorded with it; without that, the users' parts kept the
    bulletin archived after the new display time."""
    bulletin = services.bulletin_create(title="Maintenance", body_html="x", display_time=clock.now)
    for user in (recipient, other_recipient):
        assert client_for(user).post(f"/api/v1/inbox/{bulletin.ref}/archive/").status_code == 204
        assert _titles(user) == []
    with _dying(monkeypatch):
        services.bulletin_update(bulletin=bulletin, data={"display_time": clock.now + timedelta(minutes=5)})
    record = _records()["messagecenter.item_place"]
    assert sorted(map(tuple, record["keys"])) == sorted((u.pk, bulletin.ref) for u in (recipient, other_recipient))
    assert record["complete"] is True
    clock.advance(seconds=UNRUN_GRACE.total_seconds() + 1)
    assert outbox.replay() == 2  # the bulletin's own record and the users' places
    clock.advance(minutes=5)
    assert _titles(recipient) == _titles(other_recipient) == ["Maintenance"]
    assert not OutboxEntry.objects.exists()


def test_answers_to_a_message_retracted_by_a_dying_process_leave_redis(
    operator: Any, recipient: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    actions = [{"id": "approve", "label": "Approve"}, {"id": "decline", "label": "Decline"}]
    to = {"users": [recipient.pk]}
    body = {"category": "system", "title": "Leave", "body_html": "x", "to": to, "actions": actions}
    created = client_for(operator).post("/api/v1/manage/messages/", body, format="json")
    message = Message.objects.get(pk=created.json()["id"])
    answer = client_for(recipient).post(f"/api/v1/inbox/{message.ref}/respond/", {"action": "approve"}, format="json")
    assert answer.status_code == 200
    assert set(responses_rm.responses_get(user_id=recipient.pk, actions={message.ref: actions})) == {message.ref}
    with _dying(monkeypatch):
        services.message_retract(message=message, actor=operator)
    assert _records()["messagecenter.responses"]["keys"] == [[recipient.pk, message.pk]]
    clock.advance(seconds=UNRUN_GRACE.total_seconds() + 1)
    assert outbox.replay() == 2  # the item's removal and the answers
    assert responses_rm.responses_get(user_id=recipient.pk, actions={message.ref: actions}) == {}


def test_mutes_of_a_message_type_deleted_by_a_dying_process_leave_redis(
    recipient: Any, other_recipient: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cascade deletes a mute period per user, one signal each; the type's
    own signal asks for all of them at once, so the record is complete."""
    alert = services.message_type_create(code="alert", name="Alert", category="system", self_service=True)
    for user in (recipient, other_recipient):
        services.preferences_update(user=user, muted_categories=None, muted_message_types=["alert"])
        assert get_redis().get(mc_keys.user_mutes(user.pk))
    with _dying(monkeypatch):
        alert.delete()
    record = _records()["messagecenter.user_mutes"]
    assert sorted(record["keys"]) == sorted([recipient.pk, other_recipient.pk])
    assert record["complete"] is True
    clock.advance(seconds=UNRUN_GRACE.total_seconds() + 1)
    assert outbox.replay() >= 1
    assert get_redis().get(mc_keys.user_mutes(recipient.pk)) is None
    assert get_redis().get(mc_keys.user_mutes(other_recipient.pk)) is None
