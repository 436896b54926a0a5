"""Random announcements, platforms, users and read/unread operations: the Lua
counts and the list's read flags equal a brute-force model of PostgreSQL's facts."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.api.errors import NotFound
from notices.models import Announcement
from notices.selectors import announcement_counts, announcement_list
from notices.services import announcement_delete, announcement_mark_read, announcement_mark_unread
from tests.factories import UserFactory
from tests.notices.conftest import HOUR, T0, announce, on_platforms

pytestmark = pytest.mark.django_db(transaction=True)

PLATFORMS = ("operator", "user", "customer")
platform_sets = st.sets(st.sampled_from(PLATFORMS), min_size=1).map(sorted)
hours = st.integers(min_value=-3, max_value=3)

announcement_specs = st.tuples(
    platform_sets,  # targeted platforms
    hours,  # publish offset from T0
    st.one_of(st.none(), st.integers(min_value=1, max_value=4)),  # lifetime in hours, None = never expires
)
operations = st.lists(
    st.tuples(
        st.sampled_from(["read", "unread", "delete"]),
        st.integers(min_value=0, max_value=2),  # user index
        st.integers(min_value=0, max_value=5),  # announcement index
        hours,  # when the operation happens
    ),
    max_size=14,
)


@dataclass
class Model:
    specs: dict[int, tuple[set[str], datetime, datetime | None]] = field(default_factory=dict)
    read: set[tuple[int, int]] = field(default_factory=set)

    def visible(self, platforms: set[str], now: datetime) -> set[int]:
        return {
            pk
            for pk, (targets, publish, expire) in self.specs.items()
            if targets & platforms and publish <= now and (expire is None or now < expire)
        }


@pytest.fixture
def users(db: None) -> list[Any]:
    made = [UserFactory(username=f"prop{i}") for i in range(3)]
    return made


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    user_platforms=st.lists(platform_sets, min_size=3, max_size=3),
    specs=st.lists(announcement_specs, min_size=1, max_size=6),
    ops=operations,
    query_hours=st.lists(hours, min_size=1, max_size=3),
)
def test_counts_and_flags_match_a_brute_force_model(
    users: list[Any], user_platforms: list[list[str]], specs: list[Any], ops: list[Any], query_hours: list[int]
) -> None:
    Announcement.objects.all().delete()
    model = Model()
    for user, platforms in zip(users, user_platforms, strict=True):
        on_platforms(user, *platforms)
    made = []
    for targets, publish_h, life in specs:
        publish = T0 + publish_h * HOUR
        expire = None if life is None else publish + life * HOUR
        a = announce(targets, publish_at=publish, expire_at=expire)
        made.append(a.pk)
        model.specs[a.pk] = (set(targets), publish, expire)

    for op, user_index, a_index, when_h in ops:
        user, pk = users[user_index], made[a_index % len(made)]
        now = T0 + when_h * HOUR
        allowed = pk in model.visible(set(user_platforms[user_index]), now)
        if op == "delete":
            if pk in model.specs:
                announcement_delete(announcement=Announcement.objects.get(pk=pk))
                del model.specs[pk]
                model.read = {(u, a) for u, a in model.read if a != pk}
            continue
        service = announcement_mark_read if op == "read" else announcement_mark_unread
        if not allowed:
            with pytest.raises(NotFound):
                service(user=user, announcement_id=pk, now=now)
            continue
        service(user=user, announcement_id=pk, now=now)
        if op == "read":
            model.read.add((user.pk, pk))
        else:
            model.read.discard((user.pk, pk))

    for user, platforms in zip(users, user_platforms, strict=True):
        for h in query_hours:
            now = T0 + h * HOUR
            visible = model.visible(set(platforms), now)
            read = {pk for pk in visible if (user.pk, pk) in model.read}
            assert announcement_counts(user=user, now=now) == {"read": len(read), "unread": len(visible) - len(read)}
            page = announcement_list(user=user, limit=100, now=now)
            assert {item.announcement.pk: item.read for item in page.items} == {pk: pk in read for pk in visible}
            publish_order = [(item.announcement.publish_at, item.announcement.pk) for item in page.items]
            assert publish_order == sorted(publish_order, reverse=True)
