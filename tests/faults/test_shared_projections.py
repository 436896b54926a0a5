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

from durability import outbox, rebuild
from durability.models import OutboxEntry
from durability.projection import UNRUN_GRACE, UNRUN_TOPIC
from messagecenter import services
from messagecenter.models import UserGroupMembership
from tests.conftest import client_for
from tests.factories import UserFactory
from tests.messagecenter.conftest import make_group

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def _dying(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with monkeypatch.context() as patched:
        patched.setattr(transaction, "on_commit", lambda func, *_a, **_k: None)
        yield


def _titles(user: Any) -> list[str]:
    return [item["title"] for item in client_for(user).get("/api/v1/inbox/").json()["results"]]


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
