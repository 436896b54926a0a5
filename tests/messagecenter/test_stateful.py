"""Random sequences of sends (users, groups, everyone; push and pull), bulletins,
membership changes, reads, hides, retractions, trims of the removal list and time: after every step each
user's inbox and counts from the selectors equal a model computed from
PostgreSQL alone plus the test's own record of reads and seen marks."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from core.exceptions import NotFound
from core.redis import keyspace_flush
from messagecenter import selectors, services
from messagecenter.items import bulletin_entry, message_entry
from messagecenter.models import (
    CATEGORIES,
    Bulletin,
    InboxHidden,
    ItemSlotMonth,
    Message,
    MessageStatus,
    UserGroup,
    UserGroupMembership,
)
from messagecenter.readmodel import to_ms
from tests.conftest import client_for
from tests.factories import SuperuserFactory, UserFactory
from tests.messagecenter.conftest import Clock

pytestmark = pytest.mark.django_db

START = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
N_USERS = 4
# Few distinct durations, so that expiry and display times often fall exactly
# on a tick of the clock: the boundaries are where bugs live.
EXPIRY = st.one_of(st.none(), st.sampled_from([5, 30, 60]))
DISPLAY = st.sampled_from([-30, 0, 5, 30])


# The machines of this file and test_fallback.py share the clock and the timings.
CLOCK = Clock(START)


class InboxMachine(RuleBasedStateMachine):
    users: list[Any] = []
    operator: Any = None

    def __init__(self) -> None:
        super().__init__()
        # One example = one fresh world: rows of the message centre and Redis.
        Message.objects.all().delete()
        Bulletin.objects.all().delete()
        UserGroup.objects.all().delete()
        InboxHidden.objects.all().delete()
        ItemSlotMonth.objects.all().delete()
        keyspace_flush()
        CLOCK.now = START
        self.reads: dict[tuple[int, str], bool] = {}
        self.seen: dict[int, int] = {}
        self.groups: list[UserGroup] = []

    @initialize()
    def make_groups(self) -> None:
        self.groups = [services.user_group_create(name=f"g{i}") for i in range(2)]

    # --- the model: PostgreSQL alone ----------------------------------------------

    def visible(self, user: Any) -> list[tuple[int, str, str, str]]:
        """(score, member, ref, category) of the user's live items, newest first."""
        now = timezone.now()
        hidden = set(InboxHidden.objects.filter(user=user).values_list("item_id", flat=True))
        items = []
        for message in Message.objects.exclude(status=MessageStatus.RETRACTED):
            if message.expire_at is not None and message.expire_at <= now:
                continue
            if not (message.everyone or user.pk in message.audience):
                continue
            entry = message_entry(message)
            items.append((entry.score, entry.member, entry.ref, entry.category))
        member_groups = set(UserGroupMembership.objects.filter(user=user).values_list("group_id", flat=True))
        for bulletin in Bulletin.objects.prefetch_related("groups"):
            if bulletin.display_time > now or (bulletin.expire_at is not None and bulletin.expire_at <= now):
                continue
            group_ids = {g.pk for g in bulletin.groups.all()}
            if group_ids and not group_ids & member_groups:
                continue
            entry = bulletin_entry(bulletin)
            items.append((entry.score, entry.member, entry.ref, entry.category))
        items = [i for i in items if i[2] not in hidden]
        # Redis orders equal scores by member, descending.
        return sorted(items, key=lambda i: (i[0], i[1]), reverse=True)

    # --- rules ------------------------------------------------------------------------

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
        if not (user_ids or group_ids or everyone):
            everyone = True
        services.message_send(
            sender=self.operator,
            category=category,
            title="t",
            body_html="b",
            user_ids=user_ids,
            group_ids=group_ids,
            everyone=everyone,
            expire_at=timezone.now() + timedelta(minutes=expire_minutes) if expire_minutes else None,
        )

    @rule(
        groups=st.sets(st.integers(0, 1), max_size=2),
        display_minutes=DISPLAY,
        expire_minutes=EXPIRY,
    )
    def bulletin(self, groups: set[int], display_minutes: int, expire_minutes: int | None) -> None:
        display = timezone.now() + timedelta(minutes=display_minutes)
        services.bulletin_create(
            title="b",
            body_html="x",
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
    def edit_bulletin(self, data: Any, display_minutes: int | None, groups: set[int] | None) -> None:
        bulletin = data.draw(st.sampled_from(list(Bulletin.objects.order_by("pk"))))
        changes: dict[str, Any] = {}
        if display_minutes is not None:
            changes["display_time"] = timezone.now() + timedelta(minutes=display_minutes)
            changes["expire_at"] = None
        if groups is not None:
            changes["group_ids"] = [self.groups[i].pk for i in groups]
        services.bulletin_update(bulletin=bulletin, data=changes)

    @precondition(lambda self: Bulletin.objects.exists())
    @rule(data=st.data())
    def delete_bulletin(self, data: Any) -> None:
        services.bulletin_delete(bulletin=data.draw(st.sampled_from(list(Bulletin.objects.order_by("pk")))))

    @rule(user=st.integers(0, N_USERS - 1), group=st.integers(0, 1), join=st.booleans())
    def membership(self, user: int, group: int, join: bool) -> None:
        change = services.user_group_add_members if join else services.user_group_remove_members
        change(group=self.groups[group], user_ids=[self.users[user].pk])

    def _pick_ref(self, data: Any, user: Any) -> str:
        refs = [f"m{pk}" for pk in Message.objects.values_list("pk", flat=True)]
        refs += [f"b{pk}" for pk in Bulletin.objects.values_list("pk", flat=True)]
        return str(data.draw(st.sampled_from([*refs, "m999999", "b999999"])))

    @rule(data=st.data(), user=st.integers(0, N_USERS - 1), read=st.booleans())
    def mark(self, data: Any, user: int, read: bool) -> None:
        who = self.users[user]
        ref = self._pick_ref(data, who)
        live = ref in {i[2] for i in self.visible(who)}
        try:
            (services.inbox_mark_read if read else services.inbox_mark_unread)(user=who, item_id=ref)
        except NotFound:
            assert not live, ref
            return
        assert live, ref
        self.reads[(who.pk, ref)] = read

    @rule(data=st.data(), user=st.integers(0, N_USERS - 1))
    def hide(self, data: Any, user: int) -> None:
        who = self.users[user]
        ref = self._pick_ref(data, who)
        live = ref in {i[2] for i in self.visible(who)}
        try:
            services.inbox_hide(user=who, item_id=ref)
        except NotFound:
            assert not live, ref
            return
        assert live, ref

    @rule(user=st.integers(0, N_USERS - 1), category=st.one_of(st.none(), st.sampled_from(CATEGORIES)))
    def read_all(self, user: int, category: str | None) -> None:
        who = self.users[user]
        expected = 0
        for _score, _member, ref, cat in self.visible(who):
            if category in (None, cat) and not self.reads.get((who.pk, ref), False):
                self.reads[(who.pk, ref)] = True
                expected += 1
        assert services.inbox_mark_all_read(user=who, category=category) == expected

    @rule(user=st.integers(0, N_USERS - 1))
    def mark_seen(self, user: int) -> None:
        who = self.users[user]
        top = max((i[0] for i in self.visible(who)), default=0)
        self.seen[who.pk] = max(to_ms(timezone.now()), top)
        services.inbox_mark_seen(user=who)

    @precondition(lambda self: Message.objects.exclude(status=MessageStatus.RETRACTED).exists())
    @rule(data=st.data())
    def retract(self, data: Any) -> None:
        message = data.draw(
            st.sampled_from(list(Message.objects.exclude(status=MessageStatus.RETRACTED).order_by("pk")))
        )
        assert services.message_retract(message=message) is True

    @rule(keep=st.sampled_from([0, 2]))
    def trim_removals(self, keep: int) -> None:
        services.inbox_removed_trim(keep=keep)

    @rule(minutes=st.sampled_from([1, 5, 30]))
    def tick(self, minutes: int) -> None:
        CLOCK.now = CLOCK.now + timedelta(minutes=minutes)

    # --- the invariant --------------------------------------------------------------

    @invariant()
    def inbox_matches_postgres(self) -> None:
        for user in self.users:
            expected = self.visible(user)
            got: list[tuple[str, bool]] = []
            cursor = None
            while True:
                page = selectors.inbox_list(user=user, limit=3, cursor=cursor)
                got += [(item.id, item.read) for item in page.results]
                cursor = page.next_cursor
                if cursor is None:
                    break
            want = [(ref, self.reads.get((user.pk, ref), False)) for _s, _m, ref, _c in expected]
            assert got == want, (user.username, got, want)
            # The API's first page, twice: computed or from the page cache, the same answer.
            for _ in range(2):
                body = client_for(user).get("/api/v1/inbox/?limit=3").json()
                assert [(r["id"], r["read"]) for r in body["results"]] == want[:3], (user.username, body)
            unread = [(ref, cat) for _s, _m, ref, cat in expected if not self.reads.get((user.pk, ref), False)]
            counts = selectors.inbox_counts(user=user)
            assert counts["unread"] == len(unread)
            assert page.unread_count == len(unread)
            assert body["unread_count"] == len(unread)
            for category in CATEGORIES:
                assert counts["by_category"][category] == sum(1 for _r, c in unread if c == category)
            watermark = self.seen.get(user.pk)
            unseen = sum(1 for s, *_ in expected if watermark is None or s > watermark)
            assert counts["unseen"] == unseen


def test_inbox_state_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    from django.conf import settings as django_settings

    monkeypatch.setattr(timezone, "now", CLOCK)
    monkeypatch.setattr(django_settings, "MESSAGECENTER_PUSH_THRESHOLD", 2)
    monkeypatch.setattr(django_settings, "MESSAGECENTER_FANOUT_CHUNK", 2)
    InboxMachine.users = [UserFactory(username=f"hyp{i}") for i in range(N_USERS)]
    InboxMachine.operator = SuperuserFactory(username="hyp-operator")
    run_state_machine_as_test(
        InboxMachine,
        settings=settings(
            max_examples=15,
            stateful_step_count=20,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
