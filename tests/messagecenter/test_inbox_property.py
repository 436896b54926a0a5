"""The inbox's one property: the Redis path and PostgreSQL alone agree.

Random sequences of operations go through the normal services with Redis up:
sends (users, groups, everyone; push and pull), bulletins (created, edited,
deleted, groups changed), notifications (sent, withdrawn), retractions,
membership changes, trims of the removal list, time, the user's mutes
(categories and message types muted and unmuted) and marks (read, unread,
hide, read all, seen), answers to messages' actions, archive, unarchive, snooze (the clock moving past wake
times) and bulk actions. Every mark is committed to PostgreSQL before its
answer, so PostgreSQL alone holds everything the user did.

After every step, for every user, the fallback inbox (``messagecenter.fallback``:
PostgreSQL rows, the read state among them) must equal the Redis path:
the same items in the same order with the same read flags, page by page
(the same cursors), and the same counts; the API's first page (computed,
then from the read cache) is that page too, and the archived list is walked
on both paths. Now and then a random query (category, unread only, since,
archived, a search text) and every single item are compared too.
Service answers are held to PostgreSQL as well: a mark or hide finds the
item exactly when the fallback says it is live, a "read all" marks exactly
the unread items the fallback lists. A model built from the message and
bulletin rows alone (``visible``) holds both paths to the audience rules.
Some messages offer actions and carry a Chinese translation: answers are
held to PostgreSQL's rows, and a Chinese reader's titles to the translations.
Some messages carry one of a few group keys and one of several actors, with
reads, "read all", archives, snoozes and deletes between their arrivals: the
rows' groups (count, actors), the keys' listings (``?group_key=``) and every
item are compared on both paths too, and the selectors' answers (groups,
answers, titles in the user's chosen language) with Redis up and down.

The month's offsets jump now and then (items that went to other users), so
a user's month bit-sets are kept as sets (sparse), as bitmaps (dense), and
switch from one to the other mid-run (messagecenter/lua/_bits.lua); a lost
Redis is rebuilt from PostgreSQL (read state restored in the compact form).
A second test drives the same machine by hand through a sequence that
surely switches forms.
"""

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any
from unittest import mock

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.db.models import Q
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
from redis.exceptions import RedisError

from core.api.errors import Conflict, NotFound, ValidationFailed
from core.redis import get_redis, keyspace_flush
from durability import healing
from durability.models import OutboxEntry
from messagecenter import fallback, group_selectors, selectors, services
from messagecenter import keys as mc_keys
from messagecenter.items import bulletin_entry, message_entry
from messagecenter.models import (
    CATEGORIES,
    Bulletin,
    InboxGroupEnd,
    InboxHidden,
    InboxItemState,
    InboxReadMonth,
    InboxSeen,
    ItemSlotMonth,
    Message,
    MessageResponse,
    MessageStatus,
    MessageType,
    MutePeriod,
    Notification,
    Subscription,
    UserGroup,
    UserGroupMembership,
    UserPreferences,
)
from messagecenter.readmodel import grouping as grouping_rm
from messagecenter.readmodel import inbox, to_ms
from messagecenter.readmodel.entries import CATEGORY_ORDER, parse_member
from messagecenter.readmodel.inbox import Page
from messagecenter.services.inbox_actions import BULK_ACTIONS
from tests.conftest import client_for
from tests.factories import SuperuserFactory, UserFactory
from tests.messagecenter.conftest import Clock, machine_settings
from tests.messagecenter.readmodel_views import unread_index_read

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
N_USERS = 3
# Few distinct durations, so that expiry and display times often fall exactly
# on a tick of the clock: the boundaries are where bugs live.
EXPIRY = st.one_of(st.none(), st.sampled_from([5, 30, 60]))
DISPLAY = st.sampled_from([-30, 0, 5, 30])
CLOCK = Clock(START)
OPERATOR_NAME = "Prop Operator"
# The forms the month bit-sets were seen in over the whole run ("set",
# "string") and "switch" once a key changed form.
FORMS_SEEN: set[str] = set()
ACTIONS = [{"id": "yes", "label": "Yes"}, {"id": "no", "label": "No"}]
GROUP_KEYS = ["k1", "k2"]
ACTORS = ["", "Ann", "Ben", "Cat", "Dan"]
LANGUAGES = [None, "en", "zh-hans"]


@contextmanager
def redis_down() -> Iterator[None]:
    """The selectors find Redis unavailable (as they do when it is down) and answer from PostgreSQL."""
    with mock.patch.object(healing, "require_ready", side_effect=RedisError("Redis is down (test)")):
        yield


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


class InboxMachine(RuleBasedStateMachine):
    users: list[Any] = []
    operator: Any = None

    def __init__(self) -> None:
        super().__init__()
        # One example = one fresh world (rows of the message centre, Redis).
        for model in (
            MutePeriod,
            UserPreferences,
            Notification,
            Subscription,
            MessageType,
            Message,
            Bulletin,
            UserGroup,
            InboxHidden,
            InboxItemState,
            InboxGroupEnd,
            InboxReadMonth,
            InboxSeen,
            OutboxEntry,
            ItemSlotMonth,
        ):
            model.objects.all().delete()
        keyspace_flush()
        CLOCK.now = START
        self.groups: list[UserGroup] = []
        # The model's read flags of message and bulletin refs, by (user id, ref).
        self.reads: dict[tuple[int, str], bool] = {}
        # The sender each message and bulletin names (None: the system).
        self.senders: dict[str, str | None] = {}
        # Each bit-set key's form when last seen (to notice a switch).
        self.forms: dict[bytes, str] = {}
        # The model's answers to messages' actions, by (user id, ref).
        self.answers: dict[tuple[int, str], str] = {}

    @initialize(gap=st.sampled_from([0, 40, 300, 1_000_000]))
    def world(self, gap: int) -> None:
        # The month's first offsets went to other users: the users' first
        # bit-sets start as sets (sparse), and most become bitmaps as items come.
        if gap:
            self.others_items(gap)
        self.groups = [services.user_group_create(name=f"fb{i}") for i in range(2)]
        services.message_type_create(code="alert", name="Alert", category="system")
        services.message_type_create(code="deal", name="Deal", category="promotion")
        services.subscription_create(message_type="alert", scope="s", user_id=self.users[0].pk)
        services.subscription_create(message_type="alert", scope="s", group_id=self.groups[0].pk)
        services.subscription_create(message_type="deal", scope="s", user_id=self.users[1].pk)
        services.subscription_create(message_type="deal", scope="s", group_id=self.groups[1].pk)

    # --- the model: message and bulletin rows alone -------------------------------------

    def visible(self, user: Any, *, archived: bool = False) -> list[str]:
        """Refs of the user's live messages and bulletins, newest first (or of
        the archived ones): snoozed items are away until their wake time and
        then placed at it."""
        now = timezone.now()
        hidden = set(InboxHidden.objects.filter(user=user).values_list("item_id", flat=True))
        # An item that arrived while its category was muted is not the user's.
        periods = list(MutePeriod.objects.filter(user=user, message_type__isnull=True))

        def muted(category: str, score: int) -> bool:
            return any(
                p.category == category and p.start_ms < score and (p.end_ms is None or score <= p.end_ms)
                for p in periods
            )

        states = {row.item_id: row for row in InboxItemState.objects.filter(user=user)}

        def shown(ref: str) -> bool:
            row = states.get(ref)
            if row is None or not (row.archived or row.snoozed_until):
                return not archived
            if row.archived:
                return archived
            return not archived and row.snoozed_until is not None and row.snoozed_until <= now

        def place(ref: str, score: int) -> int:
            row = states.get(ref)
            return to_ms(row.snoozed_until) if row is not None and row.snoozed_until else score

        items = []
        # Grouped messages collapse into rows: the paths are compared with each other for them.
        for message in Message.objects.exclude(status=MessageStatus.RETRACTED).filter(group_key=""):
            if message.expire_at is not None and message.expire_at <= now:
                continue
            if message.everyone or user.pk in message.audience:
                entry = message_entry(message)
                if not muted(entry.category, entry.score):
                    items.append((entry.score, entry.member, entry.ref))
        member_groups = set(UserGroupMembership.objects.filter(user=user).values_list("group_id", flat=True))
        for bulletin in Bulletin.objects.prefetch_related("groups"):
            if bulletin.display_time > now or (bulletin.expire_at is not None and bulletin.expire_at <= now):
                continue
            group_ids = {g.pk for g in bulletin.groups.all()}
            if not group_ids or group_ids & member_groups:
                entry = bulletin_entry(bulletin)
                # A bulletin arrives when it may first show or when it was created, whichever is later.
                if not muted(entry.category, max(entry.score, to_ms(bulletin.created_at))):
                    items.append((entry.score, entry.member, entry.ref))
        items = [(place(ref, score), member, ref) for score, member, ref in items if shown(ref)]
        # Redis orders equal scores by member, descending.
        return [ref for _s, _m, ref in sorted(items, reverse=True) if ref not in hidden]

    # --- sources ------------------------------------------------------------------------

    @rule(
        users=st.sets(st.integers(0, N_USERS - 1), max_size=N_USERS),
        groups=st.sets(st.integers(0, 1), max_size=2),
        everyone=st.booleans(),
        category=st.sampled_from(CATEGORIES),
        expire_minutes=EXPIRY,
        by_operator=st.booleans(),
        extras=st.sampled_from(["", "actions", "translated", "actions translated"]),
        group_key=st.sampled_from(["", *GROUP_KEYS]),
        actor=st.sampled_from(ACTORS),
    )
    def send(
        self,
        users: set[int],
        groups: set[int],
        everyone: bool,
        category: str,
        expire_minutes: int | None,
        by_operator: bool,
        extras: str = "",
        group_key: str = "",
        actor: str = "",
    ) -> None:
        user_ids = [self.users[i].pk for i in users]
        group_ids = [self.groups[i].pk for i in groups]
        message = services.message_send(
            sender=self.operator if by_operator else None,
            category=category,
            title=f"m-{category}",
            body_html="<p>b</p>",
            link="https://example.com/x" if everyone else "",
            user_ids=user_ids,
            group_ids=group_ids,
            everyone=everyone or not (user_ids or group_ids),
            # Grouped items never leave by themselves here: the Redis path's
            # groups do not follow an item's removal (expiry, retraction) yet,
            # PostgreSQL's do (see ``retract``).
            expire_at=timezone.now() + timedelta(minutes=expire_minutes) if expire_minutes and not group_key else None,
            actions=ACTIONS if "actions" in extras else None,
            translations={"zh-hans": {"title": f"译-{category}"}} if "translated" in extras else None,
            group_key=group_key,
            actor=actor,
        )
        self.senders[message.ref] = OPERATOR_NAME if by_operator else None

    @rule(
        groups=st.sets(st.integers(0, 1), max_size=2),
        display_minutes=DISPLAY,
        expire_minutes=EXPIRY,
        by_operator=st.booleans(),
    )
    def bulletin(self, groups: set[int], display_minutes: int, expire_minutes: int | None, by_operator: bool) -> None:
        display = timezone.now() + timedelta(minutes=display_minutes)
        bulletin = services.bulletin_create(
            title="b",
            body_html="<p>bulletin</p>",
            display_time=display,
            expire_at=display + timedelta(minutes=expire_minutes) if expire_minutes else None,
            group_ids=[self.groups[i].pk for i in groups],
            actor=self.operator if by_operator else None,
        )
        self.senders[bulletin.ref] = OPERATOR_NAME if by_operator else None

    @precondition(lambda self: Bulletin.objects.exists())
    @rule(
        data=st.data(),
        display_minutes=st.one_of(st.none(), DISPLAY),
        groups=st.one_of(st.none(), st.sets(st.integers(0, 1), max_size=2)),
    )
    def edit_bulletin(self, data: Any, display_minutes: int | None, groups: set[int] | None) -> None:
        bulletin = data.draw(st.sampled_from(list(Bulletin.objects.order_by("pk"))))
        changes: dict[str, Any] = {"title": "edited"}
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

    @precondition(lambda self: self._retractable().exists())
    @rule(data=st.data())
    def retract(self, data: Any) -> None:
        """Retract a message (a grouped one's group re-forms from the items
        left). Not a grouped message to everyone: in Redis its group keeps
        counting it, a known gap of the Redis path."""
        message = data.draw(st.sampled_from(list(self._retractable().order_by("pk"))))
        assert services.message_retract(message=message) is True

    def _retractable(self) -> Any:
        live = Message.objects.exclude(status=MessageStatus.RETRACTED)
        return live.filter(Q(group_key="") | Q(everyone=False))

    @rule(user=st.integers(0, N_USERS - 1), group=st.integers(0, 1), join=st.booleans())
    def membership(self, user: int, group: int, join: bool) -> None:
        change = services.user_group_add_members if join else services.user_group_remove_members
        change(group=self.groups[group], user_ids=[self.users[user].pk])

    @rule(
        user=st.integers(0, N_USERS - 1),
        categories=st.sets(st.sampled_from(CATEGORIES), max_size=2),
        types=st.sets(st.sampled_from(["alert", "deal"]), max_size=2),
    )
    def mute(self, user: int, categories: set[str], types: set[str]) -> None:
        """Replace what the user mutes (an empty set unmutes): periods open and close now."""
        prefs = services.preferences_update(
            user=self.users[user], muted_categories=sorted(categories), muted_message_types=sorted(types)
        )
        assert set(prefs.muted_categories) == categories
        assert set(prefs.muted_message_types) == types

    @rule(keep=st.sampled_from([0, 2]))
    def trim_removals(self, keep: int) -> None:
        services.inbox_removed_trim(keep=keep)

    @rule(gap=st.sampled_from([40, 200, 1_000_000]))
    def others_items(self, gap: int) -> None:
        """Items that went to other users took ``gap`` offsets of the month: the
        next items land far from this inbox's earlier ones (a set stays a set,
        or fills up to the point where a bitmap is smaller and switches)."""
        slots, _ = ItemSlotMonth.objects.get_or_create(month=CLOCK.now.year * 100 + CLOCK.now.month)
        slots.next_offset += gap
        slots.save(update_fields=["next_offset"])

    @rule()
    def redis_lost(self) -> None:
        """Redis loses everything; the rebuild restores it from PostgreSQL (the
        committed read state, written in the compact form)."""
        keyspace_flush()
        call_command("messagecenter_rebuild", "--warm", stdout=StringIO())

    @rule(minutes=st.sampled_from([1, 5, 30]))
    def tick(self, minutes: int) -> None:
        CLOCK.now = CLOCK.now + timedelta(minutes=minutes)

    # --- the user's marks (committed before their answer) -------------------

    def _pick_ref(self, data: Any) -> str:
        refs = [f"m{pk}" for pk in Message.objects.values_list("pk", flat=True)]
        refs += [f"b{pk}" for pk in Bulletin.objects.values_list("pk", flat=True)]
        refs += [f"n{pk}" for pk in Notification.objects.values_list("pk", flat=True)]
        return str(data.draw(st.sampled_from([*refs, "m999999", "b999999"])))

    def _live(self, who: Any, ref: str) -> bool:
        """Is the item in the user's inbox, by PostgreSQL alone (and the model's rules)?"""
        live = fallback.inbox_item_live(user_id=who.pk, ref=ref, now=timezone.now())
        if not ref.startswith("n") and ref not in self._grouped():
            # Marks reach archived items too.
            assert live is (ref in self.visible(who) or ref in self.visible(who, archived=True)), ref
        return live

    def _placed(self, who: Any, refs: list[str]) -> dict[str, str]:
        """Where each ref is in the user's inbox, by PostgreSQL alone."""
        return fallback.inbox_places(user_id=who.pk, refs=refs, now=timezone.now())

    @rule(data=st.data(), user=st.integers(0, N_USERS - 1), read=st.booleans())
    def mark(self, data: Any, user: int, read: bool) -> None:
        self.mark_ref(user=user, ref=self._pick_ref(data), read=read)

    def mark_ref(self, *, user: int, ref: str, read: bool) -> None:
        who = self.users[user]
        live = self._live(who, ref)
        try:
            (services.inbox_mark_read if read else services.inbox_mark_unread)(user=who, item_id=ref)
        except NotFound:
            assert not live, ref
            return
        assert live, ref
        self.reads[(who.pk, ref)] = read

    @rule(data=st.data(), user=st.integers(0, N_USERS - 1), action=st.sampled_from(["yes", "no", "maybe"]))
    def respond(self, data: Any, user: int, action: str) -> None:
        """An answer is taken exactly when PostgreSQL alone says the item is
        there, offers the action and was not answered; it marks the item read."""
        who, ref = self.users[user], self._pick_ref(data)
        row = fallback.inbox_get(user_id=who.pk, ref=ref, now=timezone.now())
        offered = [a["id"] for a in (row.detail.get("actions") or [])] if row is not None else []
        try:
            services.message_respond(user=who, item_id=ref, action=action)
        except NotFound:
            assert row is None, ref
            return
        except Conflict:
            assert (who.pk, ref) in self.answers, ref
            return
        except ValidationFailed:
            assert action not in offered, (ref, action, offered)
            return
        assert row is not None, ref
        assert action in offered, (ref, action)
        assert (who.pk, ref) not in self.answers, ref
        self.answers[(who.pk, ref)] = action
        self.reads[(who.pk, ref)] = True

    @rule(data=st.data(), user=st.integers(0, N_USERS - 1))
    def hide(self, data: Any, user: int) -> None:
        who, ref = self.users[user], self._pick_ref(data)
        live = ref in self._placed(who, [ref])  # archived and snoozed items are deleted too
        try:
            services.inbox_hide(user=who, item_id=ref)
        except NotFound:
            assert not live, ref
            return
        assert live, ref

    @rule(data=st.data(), user=st.integers(0, N_USERS - 1), archive=st.booleans())
    def archive(self, data: Any, user: int, archive: bool) -> None:
        who, ref = self.users[user], self._pick_ref(data)
        placed = self._placed(who, [ref])
        try:
            (services.inbox_archive if archive else services.inbox_unarchive)(user=who, item_id=ref)
        except NotFound:
            assert ref not in placed, ref
            return
        assert ref in placed, ref

    @rule(data=st.data(), user=st.integers(0, N_USERS - 1), minutes=st.sampled_from([1, 5, 30]))
    def snooze(self, data: Any, user: int, minutes: int) -> None:
        who, ref = self.users[user], self._pick_ref(data)
        placed = self._placed(who, [ref])
        try:
            services.inbox_snooze(user=who, item_id=ref, until=timezone.now() + timedelta(minutes=minutes))
        except NotFound:
            assert ref not in placed, ref
            return
        assert ref in placed, ref
        # The snooze leaves the item unread.
        self.reads[(who.pk, ref)] = False

    @rule(data=st.data(), user=st.integers(0, N_USERS - 1), action=st.sampled_from(BULK_ACTIONS))
    def bulk(self, data: Any, user: int, action: str) -> None:
        who = self.users[user]
        refs = [self._pick_ref(data) for _ in range(data.draw(st.integers(1, 3)))]
        placed = self._placed(who, refs)
        assert services.inbox_bulk(user=who, action=action, item_ids=refs) == len(placed)
        for ref, where in placed.items():
            if action in ("read", "unread") and where != "snoozed":
                self.reads[(who.pk, ref)] = action == "read"

    @rule(user=st.integers(0, N_USERS - 1), category=st.one_of(st.none(), st.sampled_from(CATEGORIES)))
    def read_all(self, user: int, category: str | None) -> None:
        who = self.users[user]
        unread = [e.ref for e in fallback.inbox_unread_entries(user_id=who.pk, category=category, now=timezone.now())]
        assert services.inbox_mark_all_read(user=who, category=category) == len(unread)
        self.reads.update(((who.pk, ref), True) for ref in unread)
        # Time passes: anything sent afterwards is newer than at_ms.
        CLOCK.now = CLOCK.now + timedelta(seconds=1)

    @rule(user=st.integers(0, N_USERS - 1), language=st.sampled_from(LANGUAGES))
    def choose_language(self, user: int, language: str | None) -> None:
        prefs = services.preferences_update(user=self.users[user], language=language)
        assert prefs.language == language

    @rule(user=st.integers(0, N_USERS - 1))
    def seen(self, user: int) -> None:
        who = self.users[user]
        services.inbox_mark_seen(user=who)

    # --- the property -------------------------------------------------------------------

    @invariant()
    def bit_set_forms(self) -> None:
        """Note the form of every month bit-set the users hold (set or bitmap)."""
        client = get_redis()
        names: set[str] = set()
        for user in self.users:
            for member in client.zrange(mc_keys.inbox(user.pk), 0, -1):
                month = parse_member(member.decode())[2]
                names.update(
                    (
                        mc_keys.push_bitmap(user.pk, month),
                        mc_keys.read_bitmap(user.pk, month),
                        mc_keys.read_ever_bitmap(user.pk, month),
                    )
                )
        for name in names:
            form = client.type(name).decode()
            if form == "none":
                continue
            assert form in ("set", "string"), (name, form)
            FORMS_SEEN.add(form)
            before = self.forms.get(name.encode())
            if before is not None and before != form:
                FORMS_SEEN.add("switch")  # set -> bitmap, or a small bitmap back to a set
            self.forms[name.encode()] = form

    @invariant()
    def both_paths_agree(self) -> None:
        """Every page of every inbox (items, order, read flags, cursors) and the counts."""
        now = timezone.now()
        for user in self.users:
            redis_pages, postgres_pages = self._paths(user, now, category=None, unread_only=False, since_ms=None)
            assert postgres_pages == redis_pages, user.username
            counts = inbox.inbox_counts(user_id=user.pk, now_ms=to_ms(now))
            assert fallback.inbox_counts(user_id=user.pk, now=now) == counts, user.username
            # Unread-only pages (ranges of the unread zsets), of all and of each category.
            for category in (None, *CATEGORIES):
                unread_pages = self._paths(user, now, category=category, unread_only=True, since_ms=None)
                assert unread_pages[1] == unread_pages[0], (user.username, category)
            # The unread counters equal the unread zsets' sizes (the inbox scripts keep both).
            index = unread_index_read(user_id=user.pk, categories=CATEGORY_ORDER)
            assert index.counters == {c: index.sizes[c] for c in CATEGORY_ORDER}, user.username
            assert index.sizes[""] == sum(index.counters.values()), user.username
            rows = [(row.ref, row.read) for page in redis_pages for row in page.rows]
            # The model: which messages and bulletins show, and their read flags.
            want = [(ref, self.reads.get((user.pk, ref), False)) for ref in self.visible(user)]
            grouped = self._grouped()
            assert [row for row in rows if not row[0].startswith("n") and row[0] not in grouped] == want, user.username
            # Senders: the operator's full name, or None for the system (notifications always).
            named = [(row.ref, row.detail.get("sender")) for page in redis_pages for row in page.rows]
            assert named == [(ref, self.senders.get(ref)) for ref, _read in rows], user.username
            # The API's first page, twice: computed, then from the read cache.
            for _ in range(2):
                body = client_for(user).get("/api/v1/inbox/?limit=2").json()
                assert [(r["id"], r["read"]) for r in body["results"]] == rows[:2], (user.username, body)
                assert body["unread_count"] == counts.unread
            # The selectors (their cursors) over the same path.
            listed: list[tuple[str, bool]] = []
            cursor = None
            while True:
                page = selectors.inbox_list(user=user, limit=3, cursor=cursor)
                listed += [(item.id, item.read) for item in page.results]
                assert page.unread_count == counts.unread
                if (cursor := page.next_cursor) is None:
                    break
            assert listed == rows, user.username
            # The archived list: both paths, and the model.
            redis_pages, postgres_pages = self._paths(
                user, now, category=None, unread_only=False, since_ms=None, archived=True
            )
            assert postgres_pages == redis_pages, user.username
            archived = [
                row.ref
                for page in redis_pages
                for row in page.rows
                if not row.ref.startswith("n") and row.ref not in grouped
            ]
            assert archived == self.visible(user, archived=True), user.username
            selected = selectors.inbox_counts(user=user)
            # (The selector adds the notices' announcements: none here.)
            by_category = {c: selected["by_category"][c] for c in CATEGORIES}
            assert (selected["unread"], by_category) == (counts.unread, counts.unread_by_category)
            assert selected["unseen"] == counts.unseen

    def _grouped(self) -> set[str]:
        return {f"m{pk}" for pk in Message.objects.exclude(group_key="").values_list("pk", flat=True)}

    @invariant()
    def groups_agree(self) -> None:
        """The rows' groups on every page and every key's listing, the same on both paths."""
        now = timezone.now()
        for user in self.users:
            for archived in (False, True):
                redis_pages, postgres_pages = self._paths(
                    user, now, category=None, unread_only=False, since_ms=None, archived=archived
                )
                redis_rows = [row for page in redis_pages for row in page.rows]
                refs = [row.ref for row in redis_rows if row.detail.get("group_key")]
                in_redis = grouping_rm.groups_of(user_id=user.pk, refs=refs)
                shown = [(row.ref, row.group) for page in postgres_pages for row in page.rows]
                assert shown == [(row.ref, in_redis.get(row.ref)) for row in redis_rows], (user.username, archived)
                # A grouped row has its group; an item without a key never has one.
                assert all((group is not None) is (ref in refs) for ref, group in shown), shown
            for key in GROUP_KEYS:
                assert walk(functools.partial(self._group_page, user, key, now, redis=False)) == walk(
                    functools.partial(self._group_page, user, key, now, redis=True)
                ), (user.username, key)

    def _group_page(self, user: Any, key: str, now: datetime, *, redis: bool, max_score: int | None, skip: int) -> Page:
        """A page of the key's listing as a Page (its counts: none) on one path."""
        if redis:
            rows, position = group_selectors._group_page(user.pk, key, max_score, skip, 2)
        else:
            rows, position = fallback.inbox_group_page(
                user_id=user.pk, group_key=key, now=now, max_score=max_score, skip=skip, limit=2
            )
        return Page(rows=rows, next_position=position, counts=inbox.Counts({}, 0))

    @rule()
    def selectors_agree_with_redis_down(self) -> None:
        """What the API serves (items with their groups, answers, titles in the
        user's chosen language, counts; every item; every key's listing) is
        the same with Redis up and down."""

        def answers(user: Any, language: str | None) -> list[Any]:
            listed = []
            cursor = None
            while True:
                page = selectors.inbox_list(user=user, limit=3, cursor=cursor, language=language)
                listed.append((page.results, page.unread_count, page.unseen_count))
                if (cursor := page.next_cursor) is None:
                    break
            keyed = [
                (key, group_selectors.inbox_group_list(user=user, group_key=key, limit=2, language=language))
                for key in GROUP_KEYS
            ]
            items: list[selectors.InboxItem | None] = []
            for ref in self._refs():
                try:
                    items.append(selectors.inbox_item_get(user=user, item_id=ref, language=language))
                except NotFound:
                    items.append(None)
            counts = selectors.inbox_counts(user=user)
            return [listed, [(k, p.results, p.next_cursor, p.unread_count) for k, p in keyed], items, counts]

        for user in self.users:
            language = selectors.preferences_get(user_id=user.pk).language
            up = answers(user, language)
            with redis_down():
                down = answers(user, language)
            assert down == up, (user.username, language)

    def _refs(self) -> list[str]:
        refs = [f"m{pk}" for pk in Message.objects.values_list("pk", flat=True)]
        refs += [f"b{pk}" for pk in Bulletin.objects.values_list("pk", flat=True)]
        return refs + [f"n{pk}" for pk in Notification.objects.values_list("pk", flat=True)]

    @invariant()
    def answers_and_languages_agree(self) -> None:
        """The inbox's answers (Redis's answer sets) are PostgreSQL's rows and
        the model's; a Chinese reader sees each message's translated title (the
        original where it has none), the same on both paths (the details compared above)."""
        answered = {
            (user_id, f"m{message_id}"): action
            for user_id, message_id, action in MessageResponse.objects.values_list("user_id", "message_id", "action")
        }
        assert answered == self.answers
        titles = {f"m{pk}": (t, tr) for pk, t, tr in Message.objects.values_list("pk", "title", "translations")}
        for user in self.users:
            for item in selectors.inbox_list(user=user, limit=100, language="zh-hans").results:
                response = item.response["action"] if item.response else None
                assert response == self.answers.get((user.pk, item.id)), (user.username, item.id)
                assert bool(item.actions) is (item.id in self._with_actions()), item.id
                if item.id in titles:
                    title, translations = titles[item.id]
                    assert item.title == (translations.get("zh-hans", {}).get("title") or title), item.id

    def _with_actions(self) -> set[str]:
        return {f"m{pk}" for pk in Message.objects.exclude(actions=[]).values_list("pk", flat=True)}

    def _paths(self, user: Any, now: datetime, **query: Any) -> tuple[list[Page], list[Page]]:
        """One listing walked by cursor on the Redis path and on PostgreSQL."""

        def redis_path(**q: Any) -> Page:
            if q.get("archived") or q.get("query"):
                return inbox.inbox_listing(user_id=user.pk, now_ms=to_ms(now), **q)
            q = {k: v for k, v in q.items() if k not in ("archived", "query")}
            page = inbox.inbox_page(user_id=user.pk, now_ms=to_ms(now), **q)
            assert isinstance(page, Page)
            return page

        def postgres_path(**q: Any) -> Page:
            return fallback.inbox_page(user_id=user.pk, now=now, **q)

        return walk(redis_path, limit=2, **query), walk(postgres_path, limit=2, **query)

    @rule(data=st.data())
    def compare_queries(self, data: Any) -> None:
        category = data.draw(st.one_of(st.none(), st.sampled_from(CATEGORIES)))
        unread_only = data.draw(st.booleans())
        since = data.draw(st.one_of(st.none(), st.sampled_from([10, 45])))
        archived = data.draw(st.booleans())
        # Titles are "m-<category>", "b" and "n-<code>"; summaries "b", "n".
        query = data.draw(st.one_of(st.none(), st.sampled_from(["M-", "b", "-SYS", "n", "zz"])))
        self.check(category=category, unread_only=unread_only, since_minutes=since, archived=archived, query=query)

    def teardown(self) -> None:
        self.check(category=None, unread_only=True, since_minutes=None)
        self.selectors_agree_with_redis_down()

    def check(
        self,
        *,
        category: str | None,
        unread_only: bool,
        since_minutes: int | None,
        archived: bool = False,
        query: str | None = None,
    ) -> None:
        """A random query, every single item and the unread refs, on both paths."""
        now = timezone.now()
        now_ms = to_ms(now)
        since_ms = to_ms(now - timedelta(minutes=since_minutes)) if since_minutes else None
        refs = [f"m{pk}" for pk in Message.objects.values_list("pk", flat=True)]
        refs += [f"b{pk}" for pk in Bulletin.objects.values_list("pk", flat=True)]
        refs += [f"n{pk}" for pk in Notification.objects.values_list("pk", flat=True)]
        for user in self.users:
            uid = user.pk
            redis_pages, postgres_pages = self._paths(
                user,
                now,
                category=category,
                unread_only=unread_only,
                since_ms=since_ms,
                archived=archived,
                query=query,
            )
            assert postgres_pages == redis_pages, (user.username, category, unread_only, since_ms, archived, query)
            for ref in [*refs, "m999999", "x1", "m1|x"]:
                row = inbox.inbox_get(user_id=uid, ref=ref, now_ms=now_ms)
                computed = fallback.inbox_get(user_id=uid, ref=ref, now=now)
                assert computed == row, (user.username, ref)
                if row is not None:  # and a grouped row's group
                    group = grouping_rm.groups_of(user_id=uid, refs=[ref]).get(ref)
                    assert computed is not None
                    assert computed.group == group, (user.username, ref)
                assert fallback.inbox_item_live(user_id=uid, ref=ref, now=now) is (row is not None)
            everything = self._paths(user, now, category=None, unread_only=False, since_ms=None)[0]
            rows = [row for page in everything for row in page.rows]
            for cat in (None, *CATEGORIES):
                assert [e.ref for e in fallback.inbox_unread_entries(user_id=uid, category=cat, now=now)] == [
                    row.ref for row in rows if not row.read and cat in (None, row.detail["category"])
                ]


def _configure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timezone, "now", CLOCK)
    monkeypatch.setattr(django_settings, "MESSAGECENTER_PUSH_THRESHOLD", 2)
    monkeypatch.setattr(django_settings, "MESSAGECENTER_FANOUT_CHUNK", 2)
    # One member per settling step: expiry, wakes and the unread zsets' build
    # take several bounded calls whenever more than one is due.
    monkeypatch.setattr(django_settings, "MESSAGECENTER_INBOX_SETTLE_STEP", 1)
    InboxMachine.users = [UserFactory(username=f"prop-user{i}") for i in range(N_USERS)]
    InboxMachine.operator = SuperuserFactory(username="prop-operator", first_name="Prop", last_name="Operator")


# Fifteen worlds in three runs of five: each run is a test of its own, which
# the suite's workers share (one run of fifteen kept one worker busy for two
# minutes). Each run's machine has a name of its own, so a derandomized run
# (Hypothesis's CI profile) draws other worlds in each.
PARTS = 3


@pytest.mark.parametrize("part", range(PARTS))
def test_the_fallback_and_the_redis_path_agree(monkeypatch: pytest.MonkeyPatch, part: int) -> None:
    _configure(monkeypatch)
    run_state_machine_as_test(
        type(f"InboxMachinePart{part}", (InboxMachine,), {}),
        settings=machine_settings(5),
    )


def _checked(machine: InboxMachine, action: Callable[[], None]) -> None:
    """A rule driven by hand, then the invariants the random runs check after every step."""
    action()
    machine.bit_set_forms()
    machine.both_paths_agree()


def test_a_bit_set_that_switches_form_keeps_both_paths_equal(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same machine driven by hand through a sequence that surely switches
    forms (the random runs above reach a switch only when their draws do): the
    month's first 40 offsets went to others, so the first pushed item makes a
    set; the second makes the set bigger than a bitmap up to offset 41 would
    be, and it becomes one; reading them and a far offset later take the
    read bit-sets through the same switch. Every step is checked as in the
    random runs."""
    _configure(monkeypatch)
    FORMS_SEEN.clear()
    machine = InboxMachine()
    step = functools.partial(_checked, machine)

    step(lambda: machine.world(gap=40))
    for _ in range(3):
        step(
            lambda: machine.send(
                users={0},
                groups=set(),
                everyone=False,
                category=CATEGORIES[0],
                expire_minutes=None,
                by_operator=True,
            )
        )
    assert {"set", "string", "switch"} <= FORMS_SEEN, FORMS_SEEN
    for message in Message.objects.order_by("pk"):
        # A default argument binds the loop variable: mypy cannot infer such a lambda.
        step(lambda ref=message.ref: machine.mark_ref(user=0, ref=ref, read=True))  # type: ignore[misc]
    step(lambda: machine.others_items(gap=1_000_000))
    step(
        lambda: machine.send(
            users={0, 1}, groups=set(), everyone=False, category=CATEGORIES[0], expire_minutes=None, by_operator=False
        )
    )
    step(machine.redis_lost)
    machine.teardown()


class _Drawn:
    """Stands for hypothesis' ``data`` in a rule driven by hand: hands out the given values in order."""

    def __init__(self, *values: Any) -> None:
        self.values = list(values)

    def draw(self, _strategy: Any) -> Any:
        return self.values.pop(0)


def test_a_snooze_that_woke_keeps_its_place_through_a_rebuild(monkeypatch: pytest.MonkeyPatch) -> None:
    """A snoozed item that has woken is in the list at its wake time. A lost
    Redis is rebuilt by delivering and merging every item at its own time,
    then placing each as its state row says: the woken item moves to its wake
    time again (found by the random runs: it stayed at its own time)."""
    _configure(monkeypatch)
    machine = InboxMachine()
    step = functools.partial(_checked, machine)

    step(lambda: machine.world(gap=0))
    step(
        lambda: machine.send(
            users={0}, groups=set(), everyone=False, category=CATEGORIES[0], expire_minutes=None, by_operator=True
        )
    )
    step(lambda: machine.bulletin(groups=set(), display_minutes=-30, expire_minutes=None, by_operator=False))
    refs = [Message.objects.get().ref, Bulletin.objects.get().ref]
    for ref in refs:
        # A default argument binds the loop variable: mypy cannot infer such a lambda.
        step(lambda ref=ref: machine.snooze(data=_Drawn(ref), user=0, minutes=1))  # type: ignore[misc]
    step(lambda: machine.tick(minutes=5))
    pages = machine._paths(machine.users[0], timezone.now(), category=None, unread_only=False, since_ms=None)[0]
    woken = {row.ref: row.score for page in pages for row in page.rows}
    assert all(woken[ref] == to_ms(START + timedelta(minutes=1)) for ref in refs), woken
    step(machine.redis_lost)
    machine.teardown()


def test_deleting_a_group_row_leaves_an_earlier_group_of_the_same_time_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two groups of one key whose items share a millisecond: archiving the
    first row ends its group, so the second item starts a group of its own;
    deleting that row deletes its group, and the first item stays archived
    (found by the random runs: the delete took every item of the key at or
    before the row's time, the archived one too, and its Redis half brought
    that item back to the list)."""
    _configure(monkeypatch)
    machine = InboxMachine()
    step = functools.partial(_checked, machine)

    step(lambda: machine.world(gap=0))

    def grouped(category: str) -> None:
        machine.send(
            users=set(),
            groups=set(),
            everyone=True,
            category=category,
            expire_minutes=None,
            by_operator=True,
            group_key="k1",
            actor="Ann",
        )

    step(lambda: grouped("transaction"))
    first = Message.objects.get().ref
    step(lambda: machine.bulk(data=_Drawn(1, first), user=0, action="archive"))
    step(lambda: grouped("interaction"))
    second = Message.objects.exclude(pk__in=[int(first[1:])]).get().ref
    step(lambda: machine.hide(data=_Drawn(second), user=0))
    user = machine.users[0]
    assert machine._placed(user, [first, second]) == {first: "archived"}
    assert not InboxHidden.objects.filter(user_id=user.pk, item_id=first).exists()
    step(machine.redis_lost)
    machine.teardown()


def _where(machine: InboxMachine, ref: str) -> dict[str, str]:
    """Where user 1 has ``ref`` (live, archived, snoozed), the same on Redis and on PostgreSQL."""
    user = machine.users[1]
    in_redis = inbox.inbox_places(user_id=user.pk, refs=[ref], now_ms=to_ms(timezone.now()))
    assert machine._placed(user, [ref]) == in_redis
    return in_redis


def _park(machine: InboxMachine, step: Callable[[Callable[[], None]], None], ref: str, how: str) -> None:
    if how == "snooze":
        step(lambda: machine.snooze(data=_Drawn(ref), user=1, minutes=5))
    else:
        step(lambda: machine.archive(data=_Drawn(ref), user=1, archive=True))


@pytest.mark.parametrize("how", ["snooze", "archive"])
def test_a_parked_bulletin_follows_its_user_out_of_a_group_and_back(monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """A user parks a group's bulletin, leaves the group, and comes back. Out
    of the group it is parked nowhere (a bulk archive finds nothing, a wake
    brings nothing back); back in, it is where the row says (found by the
    random runs: the archived and snoozed zsets kept it)."""
    _configure(monkeypatch)
    machine = InboxMachine()
    step = functools.partial(_checked, machine)

    step(lambda: machine.world(gap=0))
    step(lambda: machine.membership(group=0, join=True, user=1))
    step(lambda: machine.bulletin(groups={0}, display_minutes=0, expire_minutes=None, by_operator=True))
    ref = Bulletin.objects.get().ref
    _park(machine, step, ref, how)
    step(lambda: machine.membership(group=0, join=False, user=1))
    step(lambda: machine.bulk(data=_Drawn(1, ref), user=1, action="archive"))
    step(lambda: machine.tick(minutes=30))  # a snooze's wake time passes meanwhile
    step(lambda: machine.membership(group=0, join=True, user=1))
    assert _where(machine, ref) == {ref: "archived" if how == "archive" else "live"}
    step(lambda: machine.bulk(data=_Drawn(1, ref), user=1, action="unarchive"))
    step(machine.redis_lost)
    machine.teardown()


@pytest.mark.parametrize("how", ["snooze", "archive"])
def test_a_parked_bulletin_stays_parked_through_edits(monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """An edit takes a bulletin out of every inbox; the users who archived or
    snoozed it find it where they left it, unless its groups no longer show
    it to them, and again once they do."""
    _configure(monkeypatch)
    machine = InboxMachine()
    step = functools.partial(_checked, machine)

    def edit(**changes: Any) -> None:
        step(lambda: machine.edit_bulletin(data=_Drawn(Bulletin.objects.get()), **changes))

    step(lambda: machine.world(gap=0))
    step(lambda: machine.bulletin(groups=set(), display_minutes=0, expire_minutes=None, by_operator=True))
    ref = Bulletin.objects.get().ref
    _park(machine, step, ref, how)
    edit(display_minutes=None, groups=None)
    assert _where(machine, ref) == {ref: "archived" if how == "archive" else "snoozed"}
    edit(display_minutes=-30, groups=None)
    step(lambda: machine.tick(minutes=30))
    edit(display_minutes=None, groups={1})  # user 1 is in no group
    assert _where(machine, ref) == {}
    edit(display_minutes=None, groups=set())
    assert _where(machine, ref) == {ref: "archived" if how == "archive" else "live"}
    step(machine.redis_lost)
    machine.teardown()


@pytest.mark.parametrize("how", ["snooze", "archive"])
def test_a_bulletin_moved_to_show_later_comes_again_as_new(monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """Moving a shown bulletin's display time ahead drops what users did with
    its earlier showing: at the new time it is in every list, not parked."""
    _configure(monkeypatch)
    machine = InboxMachine()
    step = functools.partial(_checked, machine)

    step(lambda: machine.world(gap=0))
    step(lambda: machine.bulletin(groups=set(), display_minutes=0, expire_minutes=None, by_operator=True))
    ref = Bulletin.objects.get().ref
    _park(machine, step, ref, how)
    step(lambda: machine.edit_bulletin(data=_Drawn(Bulletin.objects.get()), display_minutes=30, groups=None))
    assert not InboxItemState.objects.filter(item_id=ref).exists()
    assert _where(machine, ref) == {}
    step(lambda: machine.tick(minutes=30))
    assert _where(machine, ref) == {ref: "live"}
    step(machine.redis_lost)
    machine.teardown()


def test_answers_and_translations_keep_both_paths_equal(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine by hand through the answers' cases (the random runs reach
    them only when their draws do): a message with actions and a translation
    to a user and a group, an answer, a second answer (refused), an action it
    does not offer, an answer from someone it was not sent to, then a lost
    Redis: the answers come back from PostgreSQL."""
    _configure(monkeypatch)
    machine = InboxMachine()

    def step(action: Callable[[], None]) -> None:
        _checked(machine, action)
        machine.answers_and_languages_agree()

    step(lambda: machine.world(gap=0))
    step(lambda: machine.membership(user=1, group=0, join=True))
    step(
        lambda: machine.send(
            users={0},
            groups={0},
            everyone=False,
            category=CATEGORIES[0],
            expire_minutes=None,
            by_operator=True,
            extras="actions translated",
        )
    )
    ref = Message.objects.get().ref
    step(lambda: machine.respond(data=_Drawn(ref), user=0, action="yes"))
    assert machine.answers == {(machine.users[0].pk, ref): "yes"}
    step(lambda: machine.respond(data=_Drawn(ref), user=0, action="no"))
    step(lambda: machine.respond(data=_Drawn(ref), user=1, action="maybe"))
    step(lambda: machine.respond(data=_Drawn(ref), user=2, action="yes"))
    step(lambda: machine.respond(data=_Drawn(ref), user=1, action="no"))
    assert len(machine.answers) == 2
    step(machine.redis_lost)
    machine.teardown()
