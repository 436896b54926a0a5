"""django-notifications-hq's notifications and the message centre's inbox:
each ``notify.send`` is one message to all its recipients, and reading,
unreading and deleting on either side shows on the other; archiving and
snoozing in the inbox read the notification until the item is back in the
list. Checked in PostgreSQL (the rows) and through the inbox's API (the read
model)."""

from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import Group
from django.core import checks
from django.core.management import call_command
from django.db import transaction
from django.test import Client, override_settings
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from messagecenter import services as mc_services
from messagecenter.models import InboxHidden, InboxItemState, Message
from notifications.base.models import notify_handler
from notifications.models import InboxLink, Notification
from notifications.services import inbox_push
from notifications.services.inbox import push_scan_soon
from notifications.signals import notify
from notifications.utils import id2slug
from tests.conftest import client_for
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

SOFT = {"SOFT_DELETE": True}


def _page(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _live_unread(client: Client) -> int:
    count: int = client.get("/inbox/notifications/api/unread_count/").json()["unread_count"]
    return count


def _inbox(user: Any, *, archived: bool = False) -> dict[str, dict[str, Any]]:
    """The user's inbox items by id (first page, as the API lists them), or its archived ones."""
    url = "/api/v1/inbox/?limit=100" + ("&archived=true" if archived else "")
    return {item["id"]: item for item in client_for(user).get(url).json()["results"]}


def _inbox_unread(user: Any) -> int:
    """The badge: the inbox's unread count, which the bell's total equals here (no announcements)."""
    counts = client_for(user).get("/api/v1/inbox/counts/").json()
    assert counts["total_unread"] == counts["unread"]
    unread: int = counts["unread"]
    return unread


def _snoozed(user: Any) -> set[str]:
    """Refs of the user's items snoozed now (the message centre's rows say so)."""
    now = timezone.now()
    return set(
        InboxItemState.objects.filter(user=user, archived=False, snoozed_until__gt=now).values_list(
            "item_id", flat=True
        )
    )


def _snooze(user: Any, ref: str, *, hours: float = 1) -> None:
    until = (timezone.now() + timedelta(hours=hours)).replace(tzinfo=None).isoformat()
    answer = client_for(user).post(f"/api/v1/inbox/{ref}/snooze/", {"until": until}, format="json")
    assert answer.status_code == 204, answer.content


def _ref(notification: Notification) -> str:
    return f"m{InboxLink.objects.get(pk=notification.pk).message_id}"


@override_settings(DJANGO_NOTIFICATIONS_CONFIG={"USE_JSONFIELD": True})
def test_one_send_is_one_message_for_every_recipient(operator: Any, recipient: Any, other_recipient: Any) -> None:
    group = Group.objects.create(name="reviewers")
    group.user_set.add(recipient, other_recipient)
    results = notify.send(operator, recipient=group, verb="approved", description="Line one\nline <two>", url="/x/")
    (handler, rows), *_ = results
    assert handler is notify_handler
    assert [type(r) for r in rows] == [Notification, Notification]
    assert {r.recipient_id for r in rows} == {recipient.pk, other_recipient.pk}
    message = Message.objects.get()
    assert message.audience_size == 2
    assert message.category == "interaction"
    assert message.title == "olivia-operator approved"
    assert set(InboxLink.objects.values_list("message_id", flat=True)) == {message.pk}
    for user in (recipient, other_recipient):
        item = _inbox(user)[f"m{message.pk}"]
        assert (item["kind"], item["category"], item["read"]) == ("message", "interaction", False)
        assert item["summary"] == "Line one\nline <two>"
        detail = client_for(user).get(f"/api/v1/inbox/m{message.pk}/").json()
        assert "&lt;two&gt;" in detail["body_html"]
        assert detail["link"] == "/x/"
    # A list or queryset of users is one send too.
    notify.send(operator, recipient=[recipient, other_recipient], verb="pinged")
    assert Message.objects.count() == 2


@override_settings(NOTIFICATIONS_INBOX_CATEGORY="system")
def test_the_category_is_a_setting(operator: Any, recipient: Any) -> None:
    notify.send(operator, recipient=recipient, verb="ran")
    assert Message.objects.get().category == "system"


@override_settings(NOTIFICATIONS_INBOX_ENABLED=False)
def test_with_delivery_off_nothing_reaches_the_inbox(operator: Any, recipient: Any) -> None:
    notify.send(operator, recipient=recipient, verb="ran")
    assert Notification.objects.count() == 1
    assert not Message.objects.exists()
    assert _live_unread(_page(recipient)) == 1


def test_marks_made_here_reach_the_inbox(operator: Any, recipient: Any) -> None:
    first, second = (notify.send(operator, recipient=recipient, verb=v)[0][1][0] for v in ("a", "b"))
    page = _page(recipient)
    assert _inbox_unread(recipient) == 2 == _live_unread(page)

    assert page.get(f"/inbox/notifications/mark-as-read/{id2slug(first.pk)}/").status_code == 302
    assert _inbox(recipient)[_ref(first)]["read"] is True
    assert _inbox_unread(recipient) == 1 == _live_unread(page)

    page.post(f"/inbox/notifications/mark-as-unread/{id2slug(first.pk)}/")
    assert _inbox(recipient)[_ref(first)]["read"] is False

    # The queryset's UPDATE (no save() per row) reaches the inbox as well.
    Notification.objects.filter(recipient=recipient).mark_all_as_read()
    assert _inbox_unread(recipient) == 0 == _live_unread(page)
    Notification.objects.filter(pk=second.pk).mark_all_as_unread()
    assert _inbox_unread(recipient) == 1 == _live_unread(page)

    ref = _ref(second)
    assert page.get(f"/inbox/notifications/delete/{id2slug(second.pk)}/").status_code == 302
    assert not Notification.objects.filter(pk=second.pk).exists()
    assert ref not in _inbox(recipient)
    assert InboxHidden.objects.filter(user=recipient, item_id=ref).exists()
    assert not InboxLink.objects.filter(pk=second.pk).exists()


@override_settings(DJANGO_NOTIFICATIONS_CONFIG=SOFT)
def test_a_soft_delete_here_deletes_the_inbox_item(operator: Any, recipient: Any) -> None:
    row = notify.send(operator, recipient=recipient, verb="a")[0][1][0]
    ref = _ref(row)
    _page(recipient).get(f"/inbox/notifications/delete/{id2slug(row.pk)}/")
    row.refresh_from_db()
    assert row.deleted is True
    assert ref not in _inbox(recipient)


def test_marks_made_in_the_inbox_reach_the_notifications(operator: Any, recipient: Any) -> None:
    rows = [notify.send(operator, recipient=recipient, verb=f"v{i}")[0][1][0] for i in range(3)]
    api = client_for(recipient)
    page = _page(recipient)

    assert api.post(f"/api/v1/inbox/{_ref(rows[0])}/read/").status_code == 204
    assert _live_unread(page) == 2 == _inbox_unread(recipient)
    rows[0].refresh_from_db()
    assert rows[0].unread is False

    api.post(f"/api/v1/inbox/{_ref(rows[0])}/unread/")
    assert _live_unread(page) == 3
    assert Notification.objects.get(pk=rows[0].pk).unread is True

    api.post("/api/v1/inbox/read-all/", {}, format="json")
    assert _live_unread(page) == 0 == _inbox_unread(recipient)
    assert not Notification.objects.filter(unread=True).exists()

    api.post("/api/v1/inbox/bulk/", {"action": "unread", "ids": [_ref(r) for r in rows[1:]]}, format="json")
    unread = page.get("/inbox/notifications/api/unread_list/").json()
    assert unread["unread_count"] == 2
    assert {item["id"] for item in unread["unread_list"]} == {rows[1].pk, rows[2].pk}

    ref = _ref(rows[1])
    assert api.delete(f"/api/v1/inbox/{ref}/").status_code == 204
    assert page.get("/inbox/notifications/").status_code == 200  # the list page syncs too
    assert not Notification.objects.filter(pk=rows[1].pk).exists()
    assert _live_unread(page) == 1 == _inbox_unread(recipient)


@override_settings(DJANGO_NOTIFICATIONS_CONFIG=SOFT)
def test_a_delete_in_the_inbox_soft_deletes_with_soft_delete_on(operator: Any, recipient: Any) -> None:
    row = notify.send(operator, recipient=recipient, verb="a")[0][1][0]
    client_for(recipient).post("/api/v1/inbox/bulk/", {"action": "delete", "ids": [_ref(row)]}, format="json")
    assert _live_unread(_page(recipient)) == 0
    row.refresh_from_db()
    assert row.deleted is True
    assert not InboxLink.objects.filter(pk=row.pk).exists()


def test_a_mark_made_before_delivery_waits_for_it(operator: Any, recipient: Any, monkeypatch: Any) -> None:
    """With a broker the message reaches the inbox a moment after the send: a
    mark made in between is kept and carried over by the next sync."""
    delivered: list[Any] = []
    monkeypatch.setattr("messagecenter.services.messages.delivery_add", lambda **kw: delivered.append(kw["first"]))
    row = notify.send(operator, recipient=recipient, verb="a")[0][1][0]
    row.mark_as_read()
    assert InboxLink.objects.get(pk=row.pk).unread is True  # not carried yet: nothing to mark
    delivered[0]()  # the delivery task runs
    assert _inbox_unread(recipient) == 1
    assert _live_unread(_page(recipient)) == 0 == _inbox_unread(recipient)
    assert InboxLink.objects.get(pk=row.pk).unread is False


def test_a_plain_update_is_carried_by_the_next_look(operator: Any, recipient: Any) -> None:
    """Code that rewrites rows with a plain UPDATE (no save(), no queryset
    method of the app) is noticed when a sync next looks for changes: at most
    NOTIFICATIONS_INBOX_RESCAN_SECONDS later."""
    row = notify.send(operator, recipient=recipient, verb="a")[0][1][0]
    page = _page(recipient)
    assert _live_unread(page) == 1  # this sync looked: the next one within the window does not
    Notification.objects.filter(pk=row.pk).update(unread=False)
    assert _inbox_unread(recipient) == 1
    push_scan_soon(recipient.pk)  # the window is over
    assert _live_unread(page) == 0 == _inbox_unread(recipient)


def test_a_muted_recipient_gets_no_item_no_link_and_a_read_row(
    operator: Any, recipient: Any, other_recipient: Any
) -> None:
    """What arrives in a muted category never reaches the inbox, not even after
    unmuting: the row is stored read, or it would count in the live count alone."""
    client_for(other_recipient).put(
        "/api/v1/me/preferences/", {"muted_categories": ["interaction"], "muted_message_types": []}, format="json"
    )
    (_handler, rows), *_ = notify.send(operator, recipient=[recipient, other_recipient], verb="a")
    assert list(InboxLink.objects.values_list("user_id", flat=True)) == [recipient.pk]
    assert _inbox(other_recipient) == {}
    assert [r.unread for r in rows] == [True, False]
    assert Notification.objects.get(recipient=other_recipient).unread is False
    assert _live_unread(_page(other_recipient)) == 0 == _inbox_unread(other_recipient)
    assert _live_unread(_page(recipient)) == 1 == _inbox_unread(recipient)


def test_muting_after_delivery_changes_nothing(operator: Any, recipient: Any) -> None:
    """A mute hides what arrives while it lasts: items already there still count."""
    notify.send(operator, recipient=recipient, verb="a")
    client_for(recipient).put(
        "/api/v1/me/preferences/", {"muted_categories": ["interaction"], "muted_message_types": []}, format="json"
    )
    assert _live_unread(_page(recipient)) == 1 == _inbox_unread(recipient)


def test_a_retracted_message_reads_and_unlinks_its_rows(operator: Any, recipient: Any) -> None:
    row = notify.send(operator, recipient=recipient, verb="a")[0][1][0]
    mc_services.message_retract(message=Message.objects.get())
    # The inbox lost the item: the notification stays, read, as the badge has it.
    assert _live_unread(_page(recipient)) == 0 == _inbox_unread(recipient)
    row.refresh_from_db()
    assert row.unread is False
    assert not InboxLink.objects.filter(pk=row.pk).exists()


# --- Archived and snoozed items: out of the badge, so read here ---------------------------


def test_archiving_reads_the_notification_and_unarchiving_brings_it_back(operator: Any, recipient: Any) -> None:
    unread, read = (notify.send(operator, recipient=recipient, verb=v)[0][1][0] for v in ("a", "b"))
    read.mark_as_read()
    api = client_for(recipient)
    page = _page(recipient)
    for row in (unread, read):
        assert api.post(f"/api/v1/inbox/{_ref(row)}/archive/").status_code == 204
    assert _live_unread(page) == 0 == _inbox_unread(recipient)
    assert not Notification.objects.filter(unread=True).exists()
    assert set(_inbox(recipient, archived=True)) == {_ref(unread), _ref(read)}

    # Each comes back with its own flag: only the one unread before counts again.
    for row in (unread, read):
        api.post(f"/api/v1/inbox/{_ref(row)}/unarchive/")
    assert _live_unread(page) == 1 == _inbox_unread(recipient)
    assert set(Notification.objects.filter(unread=True).values_list("pk", flat=True)) == {unread.pk}

    # A mark on an archived item waits for its return.
    api.post(f"/api/v1/inbox/{_ref(read)}/archive/")
    api.post(f"/api/v1/inbox/{_ref(read)}/unread/")
    assert _live_unread(page) == 1 == _inbox_unread(recipient)
    api.post(f"/api/v1/inbox/{_ref(read)}/unarchive/")
    assert _live_unread(page) == 2 == _inbox_unread(recipient)
    assert Notification.objects.filter(unread=True).count() == 2


def test_a_bulk_archive_reads_the_notifications(operator: Any, recipient: Any) -> None:
    rows = [notify.send(operator, recipient=recipient, verb=f"v{i}")[0][1][0] for i in range(3)]
    refs = [_ref(r) for r in rows]
    client_for(recipient).post("/api/v1/inbox/bulk/", {"action": "archive", "ids": refs[:2]}, format="json")
    assert _live_unread(_page(recipient)) == 1 == _inbox_unread(recipient)
    client_for(recipient).post("/api/v1/inbox/bulk/", {"action": "unarchive", "ids": refs}, format="json")
    assert _live_unread(_page(recipient)) == 3 == _inbox_unread(recipient)


def test_a_snooze_reads_the_notification_until_it_ends(operator: Any, recipient: Any) -> None:
    """A snooze clears the item's flag: when it ends the item is back unread,
    and so is its notification, even one that was read before."""
    with time_machine.travel(timezone.now(), tick=True) as clock:
        unread, read = (notify.send(operator, recipient=recipient, verb=v)[0][1][0] for v in ("a", "b"))
        read.mark_as_read()
        page = _page(recipient)
        _snooze(recipient, _ref(unread), hours=1)
        _snooze(recipient, _ref(read), hours=2)
        assert _live_unread(page) == 0 == _inbox_unread(recipient)
        assert not Notification.objects.filter(unread=True).exists()

        clock.shift(timedelta(minutes=61))
        assert _live_unread(page) == 1 == _inbox_unread(recipient)
        assert Notification.objects.get(pk=unread.pk).unread is True
        clock.shift(timedelta(hours=1))
        assert _live_unread(page) == 2 == _inbox_unread(recipient)
        assert InboxLink.objects.filter(unread=True).count() == 2


def test_marking_unread_here_brings_an_archived_item_back(operator: Any, recipient: Any) -> None:
    """Not bounced back: the mark reaches the inbox as an unread item in the list."""
    row = notify.send(operator, recipient=recipient, verb="a")[0][1][0]
    ref = _ref(row)
    page = _page(recipient)
    client_for(recipient).post(f"/api/v1/inbox/{ref}/archive/")
    assert _live_unread(page) == 0 == _inbox_unread(recipient)
    page.post(f"/inbox/notifications/mark-as-unread/{id2slug(row.pk)}/")
    assert _inbox(recipient)[ref]["read"] is False
    assert _inbox(recipient, archived=True) == {}
    assert _live_unread(page) == 1 == _inbox_unread(recipient)
    assert Notification.objects.get(pk=row.pk).unread is True


def test_marking_unread_here_ends_a_snooze(operator: Any, recipient: Any) -> None:
    with time_machine.travel(timezone.now(), tick=True) as clock:
        row = notify.send(operator, recipient=recipient, verb="a")[0][1][0]
        ref = _ref(row)
        page = _page(recipient)
        _snooze(recipient, ref, hours=3)
        assert _live_unread(page) == 0 == _inbox_unread(recipient)
        Notification.objects.get(pk=row.pk).mark_as_unread()
        assert _snoozed(recipient) == set()
        assert _inbox(recipient)[ref]["read"] is False
        assert _live_unread(page) == 1 == _inbox_unread(recipient)
        # The old wake time passes: nothing more happens.
        clock.shift(timedelta(hours=4))
        assert _live_unread(page) == 1 == _inbox_unread(recipient)


def test_marks_here_on_items_parked_before_any_sync(operator: Any, recipient: Any) -> None:
    """The inbox parked the items and nothing pulled that in yet: a read mark
    here agrees already (an archived item keeps it for its return), a delete
    deletes the parked item."""
    with time_machine.travel(timezone.now(), tick=True) as clock:
        archived, snoozed, doomed = (notify.send(operator, recipient=recipient, verb=v)[0][1][0] for v in "abc")
        api = client_for(recipient)
        api.post(f"/api/v1/inbox/{_ref(archived)}/archive/")
        api.post(f"/api/v1/inbox/{_ref(doomed)}/archive/")
        _snooze(recipient, _ref(snoozed), hours=1)
        archived.mark_as_read()
        snoozed.mark_as_read()
        doomed_ref = _ref(doomed)
        doomed.delete()
        assert set(InboxHidden.objects.values_list("item_id", flat=True)) == {doomed_ref}
        assert set(InboxLink.objects.values_list("unread", flat=True)) == {False}
        page = _page(recipient)
        assert _live_unread(page) == 0 == _inbox_unread(recipient)
        api.post(f"/api/v1/inbox/{_ref(archived)}/unarchive/")
        assert _inbox(recipient)[_ref(archived)]["read"] is True
        assert _live_unread(page) == 0 == _inbox_unread(recipient)
        clock.shift(timedelta(hours=2))  # the snooze ends: unread, there and here
        assert _live_unread(page) == 1 == _inbox_unread(recipient)
        assert Notification.objects.get(pk=snoozed.pk).unread is True


def test_a_snooze_ends_only_outside_a_transaction(operator: Any, recipient: Any) -> None:
    """Ending a snooze takes two commits of the message centre: a push inside a
    transaction leaves it to the next sync, which brings the item back."""
    row = notify.send(operator, recipient=recipient, verb="a")[0][1][0]
    page = _page(recipient)
    _snooze(recipient, _ref(row))
    assert _live_unread(page) == 0
    Notification.objects.filter(pk=row.pk).update(unread=True)  # no signal: nothing pushed yet
    with transaction.atomic():
        assert inbox_push(user_ids=[recipient.pk]) == 0
    assert InboxLink.objects.get(pk=row.pk).unread is False
    assert _snoozed(recipient) == {_ref(row)}
    assert _live_unread(page) == 1 == _inbox_unread(recipient)
    assert _snoozed(recipient) == set()


def test_items_sent_before_the_category_changed_stay_in_step(operator: Any, recipient: Any) -> None:
    with override_settings(NOTIFICATIONS_INBOX_CATEGORY="system"):
        row = notify.send(operator, recipient=recipient, verb="a")[0][1][0]
    assert Message.objects.get().category == "system"
    page = _page(recipient)
    assert _live_unread(page) == 1 == _inbox_unread(recipient)  # not read for being elsewhere
    client_for(recipient).post(f"/api/v1/inbox/{_ref(row)}/archive/")
    assert _live_unread(page) == 0 == _inbox_unread(recipient)


# --- The property: whichever side acts, the two counts agree -----------------------------

_HERE = ["read", "unread", "delete", "read_all", "send"]
_THERE = ["read", "unread", "delete", "read_all", "bulk_read", "archive", "unarchive", "snooze"]


def _apply_here(name: str, row: Notification | None, operator: Any, user: Any, page: Client) -> None:
    if name == "send" or row is None:
        notify.send(operator, recipient=user, verb="again")
    elif name == "read":
        row.mark_as_read()
    elif name == "unread":
        row.mark_as_unread()
    elif name == "delete":
        page.get(f"/inbox/notifications/delete/{id2slug(row.pk)}/")
    else:
        page.get("/inbox/notifications/mark-all-as-read/")


def _apply_there(name: str, ref: str, user: Any, api: Any, pick: int) -> None:
    if name in ("read", "unread", "archive", "unarchive"):
        api.post(f"/api/v1/inbox/{ref}/{name}/")
    elif name == "delete":
        api.delete(f"/api/v1/inbox/{ref}/")
    elif name == "read_all":
        api.post("/api/v1/inbox/read-all/", {}, format="json")
    elif name == "bulk_read":
        api.post("/api/v1/inbox/bulk/", {"action": "read", "ids": [ref]}, format="json")
    else:
        _snooze(user, ref, hours=1 + pick % 3)


def _assert_in_step(user: Any, page: Client, note: Any) -> None:
    """The live count equals the badge, and each notification is unread
    exactly when its item is in the list unread; every notification's item is
    in the list, the archive or snoozed."""
    assert _live_unread(page) == _inbox_unread(user), note
    listed, archived, snoozed = _inbox(user), _inbox(user, archived=True), _snoozed(user)
    rows = list(Notification.objects.filter(recipient=user))
    assert {_ref(r) for r in rows if r.unread} == {ref for ref, item in listed.items() if not item["read"]}, note
    assert {_ref(r) for r in rows} == set(listed) | set(archived) | snoozed, note


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["here", "there", "there", "clock"]), st.integers(0, 7), st.integers(0, 5)),
        max_size=16,
    )
)
def test_the_badge_and_the_live_count_never_disagree(operator: Any, steps: list[tuple[str, int, int]]) -> None:
    """Random marks, deletes, archives, unarchives and snoozes on either side,
    and the clock ending snoozes: after each, the inbox's unread count (the
    message centre's badge; the user has nothing else there) and
    live_unread_notification_count are equal, and so are the flags."""
    user = UserFactory()
    page = _page(user)
    api = client_for(user)
    with time_machine.travel(timezone.now(), tick=True) as clock:
        for _ in range(3):
            notify.send(operator, recipient=user, verb="started")
        for side, action, pick in steps:
            rows = list(Notification.objects.filter(recipient=user).order_by("pk"))
            row = rows[pick % len(rows)] if rows else None
            if side == "here":
                _apply_here(_HERE[action % len(_HERE)], row, operator, user, page)
            elif side == "clock":
                clock.shift(timedelta(minutes=45 * (1 + pick)))  # ends some snoozes, or all
            elif row is not None:
                _apply_there(_THERE[action], _ref(row), user, api, pick)
            _assert_in_step(user, page, (side, action, pick))


# --- Settings and schema ---------------------------------------------------------------------


@override_settings(NOTIFICATIONS_INBOX_CATEGORY="gossip", NOTIFICATIONS_INBOX_KIND="notification")
def test_the_checks_refuse_an_unknown_category_and_kind() -> None:
    found = {m.id for m in checks.run_checks() if m.id and m.id.startswith("notifications.")}
    assert found == {"notifications.E001", "notifications.E002"}


def test_the_models_need_no_migration_the_app_lacks() -> None:
    call_command("makemigrations", "notifications", "--check", "--dry-run", verbosity=0)
