"""The incremental bulletin merge equals the full merge and PostgreSQL.

Random sequences of bulletin creates (shown now, backdated or scheduled,
expiring or not), edits (title, display time, groups), deletes, group
membership changes, time passing, trims of the removal list, rebuilds (with
and without losing Redis), marks, hides and reads of the users. A user's
inbox in Redis only advances when that user reads (or marks, or hides), so
one read may have many changes to take in.

After every step, for every user, three inboxes must be equal, item by item
(ref, time, read flag) and in their counts:

- incremental: a copy of the user's keys, read now (the merge takes in the
  change log from the user's access time and the configs displayed since);
- full: another copy with its bulletins dropped and its markers forgotten
  (what a membership change does), read now: every live bulletin merged;
- PostgreSQL alone (``messagecenter.fallback``).

The copies leave the user's own keys as they were, so the next steps keep
piling changes onto the same unread state.
"""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.utils import timezone
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from redis.cluster import RedisCluster

from core import keys
from core.api.errors import NotFound
from core.redis import get_redis, keyspace_flush
from messagecenter import fallback, services
from messagecenter import keys as mc_keys
from messagecenter.fill import inbox_warm
from messagecenter.models import (
    Bulletin,
    InboxHidden,
    InboxReadMonth,
    InboxSeen,
    ItemSlotMonth,
    UserGroup,
    UserGroupMembership,
)
from messagecenter.readmodel import inbox, publish, to_ms
from messagecenter.services.rebuild import inbox_rebuild
from tests.factories import UserFactory
from tests.messagecenter.conftest import Clock, machine_settings, whole_inbox

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
N_USERS = 3
EXPIRY = st.one_of(st.none(), st.sampled_from([5, 30]))
DISPLAY = st.sampled_from([-30, 0, 5, 30])
CLOCK = Clock(START)
# Copies of a user's keys live under user ids no real user has.
PROBE_BASE = 900_000_000


def _user_keys(user_id: int) -> list[bytes]:
    """Every key of one user's read model (they all carry the user's hash tag)."""
    client = get_redis()
    pattern = f"{keys.prefix()}*{keys.user_tag(user_id)}*"
    if isinstance(client, RedisCluster):
        node = client.get_node_from_key(mc_keys.inbox(user_id))
        return list(client.get_redis_connection(node).scan_iter(match=pattern, count=1000))
    return list(client.scan_iter(match=pattern, count=1000))


def copy_user(user_id: int, to: int) -> None:
    """The user's keys, as they are, under another user id (DUMP and RESTORE: any slot)."""
    client = get_redis()
    for name in _user_keys(to):
        client.delete(name)
    tag, other = keys.user_tag(user_id).encode(), keys.user_tag(to).encode()
    for name in _user_keys(user_id):
        value = client.dump(name)
        if value is not None:
            client.restore(name.replace(tag, other), 0, value, replace=True)


def rows_and_counts(user_id: int, now: datetime) -> tuple[list[tuple[str, int, bool]], Any]:
    page = inbox.inbox_page(user_id=user_id, now_ms=to_ms(now), **whole_inbox(1000))
    assert isinstance(page, inbox.Page)
    counts = inbox.inbox_counts(user_id=user_id, now_ms=to_ms(now))
    return [(row.ref, row.score, row.read) for row in page.rows], counts


class BulletinMachine(RuleBasedStateMachine):
    users: list[Any] = []

    def __init__(self) -> None:
        super().__init__()
        for model in (Bulletin, UserGroup, InboxHidden, InboxReadMonth, InboxSeen, ItemSlotMonth):
            model.objects.all().delete()
        keyspace_flush()
        CLOCK.now = START
        self.groups: list[UserGroup] = []

    @initialize()
    def world(self) -> None:
        self.groups = [services.user_group_create(name=f"bm{i}") for i in range(2)]

    def _pick(self, data: Any) -> Bulletin:
        return data.draw(st.sampled_from(list(Bulletin.objects.order_by("pk"))))

    # --- changes ------------------------------------------------------------------------

    @rule(groups=st.sets(st.integers(0, 1), max_size=2), display_minutes=DISPLAY, expire_minutes=EXPIRY)
    def create(self, groups: set[int], display_minutes: int, expire_minutes: int | None) -> None:
        display = timezone.now() + timedelta(minutes=display_minutes)
        services.bulletin_create(
            title="b",
            body_html="<p>b</p>",
            display_time=display,
            expire_at=display + timedelta(minutes=expire_minutes) if expire_minutes else None,
            group_ids=[self.groups[i].pk for i in groups],
        )

    @precondition(lambda self: Bulletin.objects.exists())
    @rule(
        data=st.data(),
        display_minutes=st.one_of(st.none(), DISPLAY),
        groups=st.one_of(st.none(), st.sets(st.integers(0, 1), max_size=2)),
    )
    def edit(self, data: Any, display_minutes: int | None, groups: set[int] | None) -> None:
        changes: dict[str, Any] = {"title": "edited"}
        if display_minutes is not None:
            changes["display_time"] = timezone.now() + timedelta(minutes=display_minutes)
            changes["expire_at"] = None
        if groups is not None:
            changes["group_ids"] = [self.groups[i].pk for i in groups]
        services.bulletin_update(bulletin=self._pick(data), data=changes)

    @precondition(lambda self: Bulletin.objects.exists())
    @rule(data=st.data())
    def delete(self, data: Any) -> None:
        services.bulletin_delete(bulletin=self._pick(data))

    @rule(user=st.integers(0, N_USERS - 1), group=st.integers(0, 1), join=st.booleans())
    def membership(self, user: int, group: int, join: bool) -> None:
        change = services.user_group_add_members if join else services.user_group_remove_members
        change(group=self.groups[group], user_ids=[self.users[user].pk])

    @rule(minutes=st.sampled_from([1, 5, 30]))
    def tick(self, minutes: int) -> None:
        CLOCK.now = CLOCK.now + timedelta(minutes=minutes)

    @rule()
    def trim_removals(self) -> None:
        services.inbox_removed_trim(keep=0)

    @rule(lose_redis=st.booleans())
    def rebuild(self, lose_redis: bool) -> None:
        """The rebuild writes the log again: after a loss from nothing (every reader
        merges everything once), while serving over what is there."""
        if lose_redis:
            keyspace_flush()
        inbox_rebuild()
        # Each user's own part comes back with their fill (a warm-up fills them all).
        inbox_warm(user_ids=[user.pk for user in self.users])

    # --- the users ----------------------------------------------------------------------

    @rule(user=st.integers(0, N_USERS - 1))
    def read(self, user: int) -> None:
        rows_and_counts(self.users[user].pk, timezone.now())

    @precondition(lambda self: Bulletin.objects.exists())
    @rule(data=st.data(), user=st.integers(0, N_USERS - 1), read=st.booleans())
    def mark(self, data: Any, user: int, read: bool) -> None:
        who, ref = self.users[user], self._pick(data).ref
        try:
            (services.inbox_mark_read if read else services.inbox_mark_unread)(user=who, item_id=ref)
        except NotFound:
            return

    @precondition(lambda self: Bulletin.objects.exists())
    @rule(data=st.data(), user=st.integers(0, N_USERS - 1))
    def hide(self, data: Any, user: int) -> None:
        try:
            services.inbox_hide(user=self.users[user], item_id=self._pick(data).ref)
        except NotFound:
            return

    # --- the property -------------------------------------------------------------------

    @invariant()
    def incremental_equals_full_equals_postgres(self) -> None:
        now = timezone.now()
        for user in self.users:
            incremental, full = PROBE_BASE + 2 * user.pk, PROBE_BASE + 2 * user.pk + 1
            copy_user(user.pk, incremental)
            copy_user(user.pk, full)
            groups = UserGroupMembership.objects.filter(user=user).values_list("group_id", flat=True)
            # Bulletins dropped, markers forgotten: the next read merges every live one.
            publish.user_groups_replace(groups_by_user={full: list(groups)}, now_ms=to_ms(now))
            rows, counts = rows_and_counts(incremental, now)
            full_rows, full_counts = rows_and_counts(full, now)
            postgres = fallback.inbox_page(user_id=user.pk, now=now, **whole_inbox(1000))
            postgres_rows = [(row.ref, row.score, row.read) for row in postgres.rows]
            assert rows == full_rows == postgres_rows, user.username
            assert counts == full_counts == fallback.inbox_counts(user_id=user.pk, now=now), user.username


def test_the_incremental_merge_equals_the_full_merge_and_postgres(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timezone, "now", CLOCK)
    # Keep every item (the cap's trim is the same on every path, but not the subject here).
    monkeypatch.setattr(django_settings, "MESSAGECENTER_INBOX_MAX_ITEMS", 1000)
    BulletinMachine.users = [UserFactory(username=f"bm-user{i}") for i in range(N_USERS)]
    run_state_machine_as_test(
        BulletinMachine,
        settings=machine_settings(12),
    )
