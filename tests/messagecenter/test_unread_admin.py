"""The admin's reading page of a message or bulletin: readers per day (checked
against a brute-force count over the activity bitmaps), who has not read it
yet (paged, CSV) and the one-click reminder (confirmed with its audience
count, sent once per confirmation, audited)."""

import csv
import io
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from pyroaring import BitMap

from audit.models import AuditEntry
from insight import activity
from messagecenter import insight, services
from messagecenter.models import Message
from tests.factories import StaffFactory, UserFactory
from tests.messagecenter.conftest import make_bulletin, make_group, send

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_activity_memory() -> Any:
    activity.forget_marked()
    yield
    activity.forget_marked()


@pytest.fixture
def admin_client(operator: Any) -> Client:
    client = Client()
    client.force_login(operator)
    return client


def test_readers_per_day_match_a_brute_force_count(operator: Any, clock: Any) -> None:
    users = [UserFactory() for _ in range(10)]
    message = send(operator, to={"users": users})
    start = clock.now
    # (day, user index) marks in time order; repeats and unread/read again count once.
    marks = [(0, 0), (0, 1), (0, 0), (1, 2), (1, 3), (1, 1), (2, 4), (3, 5), (3, 2), (3, 6)]
    first_day: dict[int, int] = {}
    for day, index in marks:
        clock.now = start + timedelta(days=day, hours=index % 5)
        services.inbox_mark_read(user=users[index], item_id=message.ref)
        if index == 3:
            services.inbox_mark_unread(user=users[index], item_id=message.ref)
        first_day.setdefault(users[index].pk, day)
    # Activity: who was active on which day (readers and non-readers alike).
    active = {0: users[0:4], 1: users[2:8], 2: [users[9]], 3: users[::2]}
    for day, people in active.items():
        for user in people:
            activity.record_active(user_id=user.pk, now=start + timedelta(days=day))
    days = insight.item_readers_per_day(item=message, end=(start + timedelta(days=3)).date())
    readers = set(first_day)
    expected, total = [], 0
    for day in range(4):
        reads = sum(1 for d in first_day.values() if d == day)
        total += reads
        expected.append((reads, total, len(readers & {u.pk for u in active[day]})))
    assert [(d.first_reads, d.cumulative, d.active_readers) for d in days] == expected
    assert [d.day for d in days] == [(start + timedelta(days=n)).date() for n in range(4)]
    assert insight.item_readers(item=message) == BitMap(readers)


def test_admin_page_lists_non_readers_and_exports(
    admin_client: Client, operator: Any, recipient: Any, other_recipient: Any, clock: Any
) -> None:
    message = send(operator, to={"users": [recipient, other_recipient]})
    services.inbox_mark_read(user=other_recipient, item_id=message.ref)
    url = f"/admin/messagecenter/message/{message.pk}/insight/"
    html = admin_client.get(url).content.decode()
    assert 'id="non-readers"' in html
    listed = re.findall(r"\(#(\d+)\)", html.split('id="non-readers"')[1].split("</ul>")[0])
    assert listed == [str(recipient.pk)]
    assert 'id="readers-per-day"' in html
    assert "<td>2026-11-22</td><td>1</td><td>1</td>" in html
    assert 'id="readers-per-day-chart"' in html
    assert f'href="{url}remind/"' in html
    unread = admin_client.get(f"{url}unread.csv")
    # The view streams: the test client's response type knows only HttpResponse.
    rows = list(csv.reader(io.StringIO(b"".join(unread.streaming_content).decode())))  # type: ignore[attr-defined]
    assert rows == [["id", "username"], [str(recipient.pk), recipient.username]]
    per_day = list(csv.reader(io.StringIO(admin_client.get(f"{url}readers.csv").content.decode())))
    assert per_day == [["day", "first_reads", "cumulative", "active_readers"], ["2026-11-22", "1", "1", "0"]]
    assert admin_client.get("/admin/messagecenter/message/999999/insight/unread.csv").status_code == 404


def test_admin_reminder_confirms_then_sends_once(
    admin_client: Client, operator: Any, recipient: Any, other_recipient: Any, clock: Any
) -> None:
    group = make_group("floor", recipient, other_recipient)
    bulletin = make_bulletin(operator, group, title="Fire drill", body_html="<p>At noon</p>")
    services.inbox_mark_read(user=other_recipient, item_id=bulletin.ref)
    url = f"/admin/messagecenter/bulletin/{bulletin.pk}/insight/remind/"
    confirm = admin_client.get(url).content.decode()
    assert "<strong>1</strong> user(s)" in confirm
    key = re.search(r'name="idempotency_key" value="([^"]+)"', confirm)
    assert key is not None
    before = Message.objects.count()
    response = admin_client.post(url, {"idempotency_key": key.group(1)})
    assert response.status_code == 302
    reminder = Message.objects.get(title="Reminder: Fire drill")
    assert reminder.audience == BitMap([recipient.pk])
    assert {e.action for e in AuditEntry.objects.filter(source="admin")} >= {"create", "remind"}
    # A double click (the same confirmation): nothing more is sent.
    admin_client.post(url, {"idempotency_key": key.group(1)})
    assert Message.objects.count() == before + 1
    # A forged key is refused without sending.
    admin_client.post(url, {"idempotency_key": "x"})
    assert Message.objects.count() == before + 1
    # Everyone has read it now: the confirmation says so and offers no button.
    services.inbox_mark_read(user=recipient, item_id=bulletin.ref)
    assert "nobody to remind" in admin_client.get(url).content.decode()


def test_reminder_needs_the_send_permission(operator: Any, recipient: Any, clock: Any) -> None:
    message = send(operator, to={"users": [recipient]})
    viewer = StaffFactory(username="viewer")
    viewer.user_permissions.add(Permission.objects.get(codename="view_message"))
    client = Client()
    client.force_login(viewer)
    url = f"/admin/messagecenter/message/{message.pk}/insight/"
    html = client.get(url).content.decode()
    assert 'id="non-readers"' in html
    assert "remind/" not in html
    assert client.get(f"{url}remind/").status_code == 403
    assert (
        client.post(f"{url}remind/", {"idempotency_key": f"admin-remind-{message.ref}-{'0' * 32}"}).status_code == 403
    )
    assert Message.objects.count() == 1


def test_readers_are_not_gathered_for_a_very_large_audience(operator: Any, recipient: Any, monkeypatch: Any) -> None:
    message = send(operator, to={"users": [recipient]})
    services.inbox_mark_read(user=recipient, item_id=message.ref)
    assert insight.message_readers(message.pk) == BitMap([recipient.pk])
    monkeypatch.setattr(insight, "READERS_AUDIENCE_MAX", 0)
    assert insight.message_readers(message.pk) is None
    days = insight.item_readers_per_day(item=message, end=message.created_at.date())
    assert [(d.first_reads, d.active_readers) for d in days] == [(1, None)]
