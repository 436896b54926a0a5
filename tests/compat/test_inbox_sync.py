"""django-notifications-hq's notifications and the message centre's inbox:
each ``notify.send`` is one message to all its recipients, and reading,
unreading and deleting on either side shows on the other, checked in
PostgreSQL (the rows) and through the inbox's API (the read model)."""

from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.core import checks
from django.core.management import call_command
from django.test import Client, override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from messagecenter import services as mc_services
from messagecenter.models import InboxHidden, Message
from notifications.base.models import notify_handler
from notifications.models import InboxLink, Notification
from notifications.services.inbox import push_scan_soon
from notifications.signals import notify
from notifications.utils import id2slug
from tests.conftest import client_for
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

SOFT = {"SOFT_DELETE": True}


def _page(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _live_unread(client: Client) -> int:
    count: int = client.get("/inbox/notifications/api/unread_count/").json()["unread_count"]
    return count


def _inbox(user: Any) -> dict[str, dict[str, Any]]:
    """The user's inbox items by id (first page, as the API lists them)."""
    return {item["id"]: item for item in client_for(user).get("/api/v1/inbox/?limit=100").json()["results"]}


def _inbox_unread(user: Any) -> int:
    unread: int = client_for(user).get("/api/v1/inbox/counts/").json()["unread"]
    return unread


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


def test_a_muted_recipient_gets_no_item_and_no_link(operator: Any, recipient: Any, other_recipient: Any) -> None:
    client_for(other_recipient).put(
        "/api/v1/me/preferences/", {"muted_categories": ["interaction"], "muted_message_types": []}, format="json"
    )
    notify.send(operator, recipient=[recipient, other_recipient], verb="a")
    assert list(InboxLink.objects.values_list("user_id", flat=True)) == [recipient.pk]
    assert _inbox(other_recipient) == {}
    assert Notification.objects.filter(recipient=other_recipient, unread=True).count() == 1


def test_a_retracted_message_unlinks_its_rows(operator: Any, recipient: Any) -> None:
    row = notify.send(operator, recipient=recipient, verb="a")[0][1][0]
    mc_services.message_retract(message=Message.objects.get())
    assert _live_unread(_page(recipient)) == 1  # the notification stays; the inbox lost it
    assert not InboxLink.objects.filter(pk=row.pk).exists()


# --- The property: whichever side acts, the two counts agree -----------------------------

_HERE = ["read", "unread", "delete", "read_all", "send"]
_THERE = ["read", "unread", "delete", "read_all", "bulk_read"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.sampled_from(["here", "there"]), st.integers(0, 4), st.integers(0, 5)), max_size=14))
def test_the_badge_and_the_live_count_never_disagree(operator: Any, steps: list[tuple[str, int, int]]) -> None:
    """Random marks and deletes on either side: after each, the inbox's unread
    count (the message centre's badge; the user has nothing else there) and
    live_unread_notification_count are equal, and so are the read flags."""
    user = UserFactory()
    page = _page(user)
    api = client_for(user)
    for _ in range(3):
        notify.send(operator, recipient=user, verb="started")
    for side, action, pick in steps:
        rows = list(Notification.objects.filter(recipient=user).order_by("pk"))
        row = rows[pick % len(rows)] if rows else None
        if side == "here":
            name = _HERE[action]
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
        elif row is not None:
            name = _THERE[action]
            ref = _ref(row)
            if name == "read":
                api.post(f"/api/v1/inbox/{ref}/read/")
            elif name == "unread":
                api.post(f"/api/v1/inbox/{ref}/unread/")
            elif name == "delete":
                api.delete(f"/api/v1/inbox/{ref}/")
            elif name == "read_all":
                api.post("/api/v1/inbox/read-all/", {}, format="json")
            else:
                api.post("/api/v1/inbox/bulk/", {"action": "read", "ids": [ref]}, format="json")
        assert _live_unread(page) == _inbox_unread(user), (side, action)
        items = _inbox(user)
        flags = {_ref(r): not r.unread for r in Notification.objects.filter(recipient=user)}
        assert flags == {ref: item["read"] for ref, item in items.items()}


# --- Settings and schema ---------------------------------------------------------------------


@override_settings(NOTIFICATIONS_INBOX_CATEGORY="gossip", NOTIFICATIONS_INBOX_KIND="notification")
def test_the_checks_refuse_an_unknown_category_and_kind() -> None:
    found = {m.id for m in checks.run_checks() if m.id and m.id.startswith("notifications.")}
    assert found == {"notifications.E001", "notifications.E002"}


def test_the_models_need_no_migration_the_app_lacks() -> None:
    call_command("makemigrations", "notifications", "--check", "--dry-run", verbosity=0)
