"""Fixtures of the message centre tests: a controllable clock and helpers."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, settings

from messagecenter import services
from messagecenter.models import UserGroup


class Clock:
    """``django.utils.timezone.now`` under the test's control (no sleeping)."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> datetime:
        self.now = self.now + timedelta(**kwargs)
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock(datetime(2026, 11, 22, 10, 0, tzinfo=UTC))
    monkeypatch.setattr(timezone, "now", c)
    return c


def make_group(name: str, *users: Any) -> UserGroup:
    group = services.user_group_create(name=name)
    if users:
        services.user_group_add_members(group=group, user_ids=[u.pk for u in users])
    return group


def send(operator: Any, *, to: dict[str, Any], category: str = "system", title: str = "Hello", **extra: Any) -> Any:
    from messagecenter.models import Message

    message = services.message_send(
        sender=operator,
        category=category,
        title=title,
        body_html=extra.pop("body_html", "<p>Body</p>"),
        user_ids=[u.pk for u in to.get("users", [])],
        group_ids=[g.pk for g in to.get("groups", [])],
        everyone=to.get("everyone", False),
        **extra,
    )
    return Message.objects.get(pk=message.pk)


def make_bulletin(operator: Any, *groups: UserGroup, title: str = "Bulletin", body_html: str = "<p>x</p>") -> Any:
    """A bulletin shown since a minute ago to ``groups`` (none: everyone)."""
    return services.bulletin_create(
        title=title,
        body_html=body_html,
        display_time=timezone.now() - timedelta(minutes=1),
        expire_at=None,
        group_ids=[group.pk for group in groups],
        actor=operator,
    )


def ids(response: Any) -> list[str]:
    return [item["id"] for item in response.json()["results"]]


def whole_inbox(limit: int) -> dict[str, Any]:
    """The page arguments of a plain read from the top: every category, read
    and unread, no cursor; the Redis path and the fallback take the same."""
    return {"category": None, "max_score": None, "skip": 0, "limit": limit, "unread_only": False, "since_ms": None}


def machine_settings(max_examples: int) -> settings:
    """A state machine's run: ``max_examples`` worlds of 25 steps each, with
    no deadline (a step talks to PostgreSQL and Redis) and the test's
    fixtures shared by every example (each world clears its rows itself)."""
    return settings(
        max_examples=max_examples,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
