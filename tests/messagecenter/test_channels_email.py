"""E-mail when still unread, sent through Django's SMTP backend to a real
SMTP server (aiosmtpd) on the loopback, with time moved by time-machine:
one e-mail per recipient who has not read, archived or deleted the item when
the delay is over (never two), the counts the operators read back, the
user's per-category choice (``digest`` defers, ``off`` sends nothing), never
for a retracted or expired item, the one-click unsubscribe, a broadcast to
everyone scanned in batches, and quiet hours (spanning midnight, across a
DST change) that hold e-mails for one summary when they end."""

from collections.abc import Iterator
from datetime import UTC, datetime, time, timedelta
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

import pytest
import time_machine
from aiosmtpd.controller import Controller
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from messagecenter import services
from messagecenter.models import ChannelHold, ItemChannels, UserPreferences
from messagecenter.quiet import QuietHours
from messagecenter.services.channels import ChannelRequest, channels_email_scan
from tests.factories import UserFactory
from tests.messagecenter.test_digests import SITE, Mailbox, _free_port

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGES = "/api/v1/manage/messages/"
START = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)


@pytest.fixture
def mailbox(settings: Any) -> Iterator[Mailbox]:
    handler = Mailbox()
    controller = Controller(handler, hostname="127.0.0.1", port=_free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = controller.port
    settings.EMAIL_USE_TLS = False
    settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = ""
    settings.EMAIL_HOST_PASSWORD = ""
    settings.EMAIL_TIMEOUT = 5
    settings.MESSAGECENTER_SITE_URL = SITE
    try:
        yield handler
    finally:
        controller.stop()


def send(operator_client: Any, *users: Any, after: int = 600, category: str = "system", **extra: Any) -> str:
    body = {
        "category": category,
        "title": extra.pop("title", "Contract renewal"),
        "summary": "Please sign before Friday.",
        "body_html": "<p>Details</p>",
        "to": extra.pop("to", {"users": [u.pk for u in users]}),
        "channels": {"email_if_unread_after_seconds": after},
        **extra,
    }
    response = operator_client.post(MESSAGES, body, format="json")
    assert response.status_code == 202, response.content
    return str(response.json()["id"])


def email_counts(operator_client: Any, message_id: str) -> dict[str, Any]:
    return dict(operator_client.get(f"{MESSAGES}{message_id}/").json()["channels"]["email"])


def test_one_email_to_each_recipient_still_unread_after_the_delay(
    mailbox: Mailbox, operator_client: Any, recipient: Any, other_recipient: Any, outsider: Any
) -> None:
    archiver = UserFactory(username="carol")
    deleter = UserFactory(username="dave")
    with time_machine.travel(START, tick=False) as clock:
        message_id = send(operator_client, recipient, other_recipient, archiver, deleter, after=600)
        ref = f"m{message_id}"
        services.inbox_mark_read(user=other_recipient, item_id=ref)
        services.inbox_archive(user=archiver, item_id=ref)
        services.inbox_hide(user=deleter, item_id=ref)
        clock.shift(timedelta(seconds=599))
        channels_email_scan()
        assert mailbox.messages == []  # not yet
        clock.shift(timedelta(seconds=1))
        run = channels_email_scan()
        assert (run.sent, run.skipped_read) == (1, 3)
        (mail,) = mailbox.messages
        assert mail["To"] == recipient.email
        assert mail["Subject"] == "Unread: Contract renewal"
        text = mail.get_body(preferencelist=("plain",))
        assert text is not None
        assert f"{SITE}/inbox/{ref}/" in str(text.get_content())
        # RFC 8058, as the digests: one click, no login.
        unsubscribe = str(mail["List-Unsubscribe"]).strip().strip("<>")
        assert unsubscribe.startswith(f"{SITE}/email/unsubscribe/channel/")
        assert mail["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
        # Never a second e-mail about the item: the scan is over for it.
        clock.shift(timedelta(hours=1))
        channels_email_scan()
        assert len(mailbox.messages) == 1
    assert email_counts(operator_client, message_id) == {"sent": 1, "skipped_read": 3, "deferred": 0}
    assert ItemChannels.objects.get(item_id=ref).email_done
    # The one-click unsubscribe turns e-mails of that category off, nothing else.
    assert Client().post(urlsplit(unsubscribe).path).status_code == 200
    channels = services.preferences_update(user=recipient).channels
    assert channels["system"]["email"] == "off"
    assert channels["promotion"]["email"] == "if_unread"


def test_digest_choice_defers_off_sends_nothing_and_users_without_address_are_passed(
    mailbox: Mailbox, operator_client: Any, recipient: Any, other_recipient: Any
) -> None:
    silent = UserFactory(username="erin", email="")
    services.preferences_update(user=recipient, channels={"promotion": {"email": "digest"}})
    services.preferences_update(user=other_recipient, channels={"promotion": {"email": "off"}})
    with time_machine.travel(START, tick=False) as clock:
        message_id = send(operator_client, recipient, other_recipient, silent, category="promotion", after=60)
        clock.shift(timedelta(minutes=2))
        channels_email_scan()
    assert mailbox.messages == []
    assert email_counts(operator_client, message_id) == {"sent": 0, "skipped_read": 0, "deferred": 1}


def test_never_for_a_retracted_or_expired_item(
    mailbox: Mailbox, operator_client: Any, operator: Any, recipient: Any
) -> None:
    with time_machine.travel(START, tick=False) as clock:
        retracted = send(operator_client, recipient, title="Retracted")
        expiring = send(
            operator_client, recipient, title="Expiring", expire_at=(START + timedelta(minutes=5)).isoformat()
        )
        assert operator_client.delete(f"{MESSAGES}{retracted}/").status_code == 204
        clock.shift(timedelta(minutes=11))
        channels_email_scan()
    assert mailbox.messages == []
    for message_id in (retracted, expiring):
        assert ItemChannels.objects.get(item_id=f"m{message_id}").email_done
        assert email_counts(operator_client, message_id)["sent"] == 0


def test_a_broadcast_to_everyone_is_scanned_in_batches_with_few_queries(
    mailbox: Mailbox, operator_client: Any, operator: Any, settings: Any
) -> None:
    settings.MESSAGECENTER_CHANNEL_SCAN_BATCH = 10
    users = [UserFactory() for _ in range(25)]
    with time_machine.travel(START, tick=False) as clock:
        message_id = send(operator_client, to={"everyone": True}, after=300)
        for reader in users[:20]:
            services.inbox_mark_read(user=reader, item_id=f"m{message_id}")
        clock.shift(timedelta(minutes=6))
        with CaptureQueriesContext(connection) as queries:
            run = channels_email_scan()
    # The operator and five users have not read it.
    assert sorted(m["To"] for m in mailbox.messages) == sorted(u.email for u in [operator, *users[20:]])
    assert run.sent == len(mailbox.messages) == 6
    assert run.skipped_read == 20
    # Per batch of users: the batch, the users with their preferences, the mutes, the claim.
    batches = -(-run.looked_at // 10)
    assert len(queries) <= 4 * batches + 6, [q["sql"][:80] for q in queries]


def test_a_second_scan_at_the_same_time_sends_nothing_twice(
    mailbox: Mailbox, operator_client: Any, recipient: Any
) -> None:
    with time_machine.travel(START, tick=False) as clock:
        message_id = send(operator_client, recipient, after=60)
        clock.shift(timedelta(minutes=2))
        stale = ItemChannels.objects.get(item_id=f"m{message_id}")  # a scan that read the row before
        channels_email_scan()
        services.channels.email.channel_email_scan_item(channels=stale, now=START + timedelta(minutes=2))
    assert len(mailbox.messages) == 1


# --- quiet hours -------------------------------------------------------------------------


BERLIN = ZoneInfo("Europe/Berlin")


def test_quiet_hours_span_midnight_and_keep_their_wall_clock_times_across_dst() -> None:
    night = QuietHours(start=time(22, 0), end=time(7, 0), zone=BERLIN)
    # An ordinary night: 22:00 to 07:00 Berlin time, 9 hours.
    assert not night.contains(datetime(2026, 11, 23, 20, 59, tzinfo=UTC))
    assert night.contains(datetime(2026, 11, 23, 21, 0, tzinfo=UTC))
    assert night.contains(datetime(2026, 11, 23, 23, 59, tzinfo=UTC))
    assert night.ends_after(datetime(2026, 11, 23, 23, 0, tzinfo=UTC)) == datetime(2026, 11, 24, 6, 0, tzinfo=UTC)
    assert not night.contains(datetime(2026, 11, 24, 6, 0, tzinfo=UTC))
    # Spring forward (29 March 2026, 02:00 -> 03:00): eight hours, still ending at 07:00 local.
    assert night.ends_after(datetime(2026, 3, 28, 21, 30, tzinfo=UTC)) == datetime(2026, 3, 29, 5, 0, tzinfo=UTC)
    # Fall back (25 October 2026, 03:00 -> 02:00): ten hours.
    assert night.ends_after(datetime(2026, 10, 24, 21, 0, tzinfo=UTC)) == datetime(2026, 10, 25, 6, 0, tzinfo=UTC)
    assert night.contains(datetime(2026, 10, 25, 5, 59, tzinfo=UTC))
    # A span ending inside the skipped hour ends when the clocks jump past it.
    skipped = QuietHours(start=time(23, 0), end=time(2, 30), zone=BERLIN)
    assert skipped.ends_after(datetime(2026, 3, 28, 23, 0, tzinfo=UTC)) == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    # One inside a day, and the empty span.
    lunch = QuietHours(start=time(12, 0), end=time(13, 0), zone=ZoneInfo("Asia/Shanghai"))
    assert lunch.contains(datetime(2026, 11, 23, 4, 30, tzinfo=UTC))
    assert not lunch.contains(datetime(2026, 11, 23, 5, 0, tzinfo=UTC))
    assert not QuietHours(start=time(9, 0), end=time(9, 0), zone=BERLIN).contains(START)


def test_quiet_hours_across_midnight_and_a_dst_change_hold_emails_for_one_summary(
    mailbox: Mailbox, operator_client: Any, recipient: Any, other_recipient: Any
) -> None:
    services.preferences_update(
        user=recipient, quiet_hours={"start": "22:00", "end": "07:00", "timezone": "Europe/Berlin"}, language="zh-hans"
    )
    # Saturday 24 October 2026, 23:00 in Berlin (21:00 UTC); the clocks go back at 03:00.
    with time_machine.travel(datetime(2026, 10, 24, 21, 0, tzinfo=UTC), tick=False) as clock:
        first = send(operator_client, recipient, other_recipient, title="Invoice 7", after=60)
        clock.shift(timedelta(minutes=30))
        second = send(operator_client, recipient, title="Invoice 8", after=60)
        third = send(operator_client, recipient, title="Read before morning", after=60)
        clock.shift(timedelta(minutes=5))
        channels_email_scan()
        assert [m["To"] for m in mailbox.messages] == [other_recipient.email]
        hold = ChannelHold.objects.get(user=recipient)
        # 07:00 in Berlin after the change back to UTC+1: 06:00 UTC, ten hours after 22:00.
        assert hold.until == datetime(2026, 10, 25, 6, 0, tzinfo=UTC)
        services.inbox_mark_read(user=recipient, item_id=f"m{third}")
        clock.move_to(datetime(2026, 10, 25, 5, 59, tzinfo=UTC))
        assert services.channels_quiet_release() == 0
        clock.move_to(datetime(2026, 10, 25, 6, 0, 30, tzinfo=UTC))
        assert services.channels_quiet_release() == 1
    summaries = mailbox.to(recipient)
    assert len(summaries) == 1  # one e-mail for everything held
    text = summaries[0].get_body(preferencelist=("plain",))
    assert text is not None
    content = str(text.get_content())
    assert "Invoice 7" in content
    assert "Invoice 8" in content
    assert "Read before morning" not in content
    # In the language the user chose.
    assert str(summaries[0]["Subject"]).strip() == "在您离开期间：收件箱中有 2 条未读"  # noqa: RUF001
    assert "在您的免打扰时段内，有 2 条项目在等您：" in content  # noqa: RUF001
    assert email_counts(operator_client, first)["sent"] == 2
    assert email_counts(operator_client, second)["sent"] == 1
    assert not ChannelHold.objects.exists()


def test_the_hourly_cap_defers_emails_to_the_digest(
    mailbox: Mailbox, operator_client: Any, recipient: Any, settings: Any
) -> None:
    settings.MESSAGECENTER_CHANNEL_MAX_PER_HOUR = 1
    with time_machine.travel(START, tick=False) as clock:
        ids = [send(operator_client, recipient, title=f"Item {n}", after=60) for n in range(3)]
        clock.shift(timedelta(minutes=2))
        channels_email_scan()
    assert [m["Subject"] for m in mailbox.messages] == ["Unread: Item 0"]
    assert [email_counts(operator_client, i)["deferred"] for i in ids] == [0, 1, 1]
    assert UserPreferences.objects.filter(user=recipient).count() <= 1


def test_a_scheduled_message_asks_for_emails_from_its_send_on(mailbox: Mailbox, operator: Any, recipient: Any) -> None:
    with time_machine.travel(START, tick=False) as clock:
        message = services.message_send(
            sender=operator,
            category="system",
            title="Tomorrow's maintenance",
            body_html="",
            user_ids=[recipient.pk],
            send_at=START + timedelta(hours=1),
            channels=ChannelRequest(email_after_seconds=60),
        )
        assert ItemChannels.objects.get(item_id=message.ref).email_due_at is None
        clock.shift(timedelta(minutes=30))
        channels_email_scan()
        clock.shift(timedelta(minutes=30))
        assert services.scheduled_send_due() == 1
        assert ItemChannels.objects.get(item_id=message.ref).email_due_at == START + timedelta(hours=1, seconds=60)
        channels_email_scan()
        assert mailbox.messages == []
        clock.shift(timedelta(seconds=60))
        channels_email_scan()
    assert [m["Subject"] for m in mailbox.messages] == ["Unread: Tomorrow's maintenance"]
