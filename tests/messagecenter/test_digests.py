"""E-mail digests, sent through Django's SMTP backend to a real SMTP server
(aiosmtpd) on the loopback: who is due, what the mail holds (both parts, the
unsubscribe headers, the old unread titles, nothing muted), one mail per
period, the signed one-click unsubscribe, and a refused address that neither
stops the batch nor goes uncounted."""

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from email import message_from_bytes, policy
from email.message import EmailMessage
from io import StringIO
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis as redis_lib
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session
from django.core.management import call_command
from django.db import connection
from django.test import Client
from prometheus_client import REGISTRY
from redis.backoff import NoBackoff
from redis.retry import Retry

import core.lua
from messagecenter import services
from messagecenter.models import UserPreferences
from messagecenter.readmodel import inbox as readmodel_inbox
from messagecenter.readmodel import publish, scripts
from messagecenter.selectors import inbox_counts
from messagecenter.services import delivery, digests
from messagecenter.tasks import digests_send_task
from tests.factories import UserFactory
from tests.messagecenter.conftest import Clock, send

pytestmark = pytest.mark.django_db(transaction=True)

SITE = "https://mc.example.org"


class Mailbox:
    """An aiosmtpd handler that keeps what it accepts and refuses some recipients."""

    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []
        self.refuse: set[str] = set()

    async def handle_RCPT(self, server: SMTP, session: Session, envelope: Envelope, address: str, options: Any) -> str:
        if address in self.refuse:
            return "550 5.1.1 No such mailbox"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or b""
        parsed = message_from_bytes(content, policy=policy.default)
        assert isinstance(parsed, EmailMessage)
        self.messages.append(parsed)
        return "250 Message accepted"

    def to(self, user: Any) -> list[EmailMessage]:
        return [m for m in self.messages if m["To"] == user.email]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
    settings.MESSAGECENTER_DIGEST_MIN_AGE_HOURS = 24
    settings.MESSAGECENTER_DIGEST_DEFAULT = "off"
    try:
        yield handler
    finally:
        controller.stop()


def _digest(user: Any, mode: str) -> None:
    services.preferences_update(user=user, email_digest=mode)


def _parts(mail: EmailMessage) -> tuple[str, str]:
    text = mail.get_body(preferencelist=("plain",))
    html = mail.get_body(preferencelist=("html",))
    assert text is not None
    assert html is not None
    return str(text.get_content()), str(html.get_content())


def _failures() -> float:
    return REGISTRY.get_sample_value("messagecenter_email_failures_total") or 0.0


def test_due_user_gets_one_digest_of_old_unread_items_without_muted_ones(
    mailbox: Mailbox, clock: Clock, operator: Any, recipient: Any, other_recipient: Any
) -> None:
    _digest(recipient, "daily")
    send(operator, to={"users": [recipient]}, title="Quarterly report is ready")
    send(operator, to={"users": [recipient]}, category="promotion", title="Half price shoes")
    read = send(operator, to={"users": [recipient]}, title="Already read item")
    services.inbox_mark_read(user=recipient, item_id=read.ref)
    # Muting after the promotion arrived leaves it in the inbox (mutes hide by
    # arrival time): the digest drops the category all the same.
    clock.advance(minutes=1)
    services.preferences_update(user=recipient, muted_categories=["promotion"])
    clock.advance(minutes=1)
    send(operator, to={"users": [recipient]}, category="promotion", title="Muted flash sale")
    clock.advance(hours=20)
    send(operator, to={"users": [recipient]}, title="Too fresh to mention")
    clock.advance(hours=5)

    run = digests.digests_send()

    assert (run.sent, run.failed) == (1, 0)
    [mail] = mailbox.to(recipient)
    assert mailbox.to(other_recipient) == []
    assert mail["Subject"] == "Your daily inbox digest"
    assert mail.get_content_type() == "multipart/alternative"
    unsubscribe = str(mail["List-Unsubscribe"]).strip()  # a long value is folded onto its own line
    assert unsubscribe.startswith(f"<{SITE}/email/unsubscribe/")
    assert unsubscribe.endswith("/>")
    assert mail["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    text, html = _parts(mail)
    for part in (text, html):
        assert "Quarterly report is ready" in part
        assert "Half price shoes" not in part
        assert "Muted flash sale" not in part
        assert "Already read item" not in part
        assert "Too fresh to mention" not in part
        assert unsubscribe[1:-1] in part
    assert "<a href=" in html
    prefs = UserPreferences.objects.get(user=recipient)
    assert prefs.last_digest_at == clock.now

    # The same period again, a little later: nothing more.
    clock.advance(hours=1)
    assert digests.digests_send().sent == 0
    assert len(mailbox.to(recipient)) == 1
    # The next day's run sends the next digest.
    clock.advance(hours=23)
    assert digests_send_task()["sent"] == 1
    assert len(mailbox.to(recipient)) == 2


def test_only_due_users_get_mail(mailbox: Mailbox, clock: Clock, operator: Any, settings: Any) -> None:
    weekly_due, weekly_not_due, daily_not_due, off, never_chose = (
        UserFactory(username=name) for name in ("wendy", "walter", "dora", "otto", "nina")
    )
    _digest(weekly_due, "weekly")
    _digest(weekly_not_due, "weekly")
    _digest(daily_not_due, "daily")
    _digest(off, "off")
    send(operator, to={"users": [weekly_due, weekly_not_due, daily_not_due, off, never_chose]}, title="Old news")
    clock.advance(days=2)
    UserPreferences.objects.filter(user=weekly_not_due).update(last_digest_at=clock.now - timedelta(days=6))
    UserPreferences.objects.filter(user=daily_not_due).update(last_digest_at=clock.now - timedelta(hours=23))
    UserPreferences.objects.filter(user=weekly_due).update(last_digest_at=clock.now - timedelta(days=7))

    assert digests.digests_send().sent == 1
    assert [m["To"] for m in mailbox.messages] == [weekly_due.email]
    assert mailbox.messages[0]["Subject"] == "Your weekly inbox digest"
    assert not UserPreferences.objects.filter(user=never_chose).exists()

    # The operator's default reaches users who never chose, and only them.
    settings.MESSAGECENTER_DIGEST_DEFAULT = "daily"
    assert digests.digests_send().sent == 1
    assert [m["To"] for m in mailbox.messages] == [weekly_due.email, never_chose.email]
    # The row records the send; it is no choice: blank, still following the default.
    assert UserPreferences.objects.get(user=never_chose).email_digest == ""
    assert UserPreferences.objects.get(user=off).email_digest == "off"


def test_never_chose_follows_the_default_daily_and_the_operators_off(
    mailbox: Mailbox, clock: Clock, operator: Any, recipient: Any, other_recipient: Any, settings: Any
) -> None:
    # The mailbox fixture pins the default to off; this test sets the shipped one.
    settings.MESSAGECENTER_DIGEST_DEFAULT = "daily"
    chooser = UserFactory(username="chloe")
    _digest(chooser, "daily")
    muter = UserFactory(username="mona")
    services.preferences_update(user=muter, muted_categories=["promotion"])  # a row, but no digest choice
    send(operator, to={"users": [recipient, other_recipient, chooser, muter]}, title="Still unread")
    clock.advance(hours=25)

    run = digests.digests_send()
    assert (run.sent, run.failed) == (4, 0)
    [mail] = mailbox.to(recipient)
    assert mail["Subject"] == "Your daily inbox digest"
    assert len(mailbox.to(muter)) == 1
    assert digests.digests_send().sent == 0  # once per day

    # The operator turns the default off: users who never chose get nothing
    # more; the one who chose daily keeps it.
    settings.MESSAGECENTER_DIGEST_DEFAULT = "off"
    clock.advance(days=1)
    assert digests.digests_send().sent == 1
    assert [m["To"] for m in mailbox.messages[4:]] == [chooser.email]
    # Turned back on (weekly now), the default reaches them again, weekly.
    settings.MESSAGECENTER_DIGEST_DEFAULT = "weekly"
    clock.advance(days=1)
    assert digests.digests_send().sent == 1  # the chooser's daily one; theirs is not a week old yet
    clock.advance(days=6)
    run = digests.digests_send()
    assert run.sent == 4
    assert {m["To"] for m in mailbox.messages[-4:]} == {u.email for u in (recipient, other_recipient, chooser, muter)}
    assert mailbox.to(recipient)[-1]["Subject"] == "Your weekly inbox digest"


def test_no_digest_when_the_operator_default_is_off(
    mailbox: Mailbox, clock: Clock, operator: Any, recipient: Any
) -> None:
    send(operator, to={"users": [recipient]}, title="Still unread")
    clock.advance(days=3)
    assert digests.digests_send() == digests.DigestRun()
    assert mailbox.messages == []
    assert not UserPreferences.objects.filter(user=recipient).exists()


def test_the_shipped_default_is_daily_and_a_bad_value_is_refused() -> None:
    """Read from the settings module in a fresh interpreter, without the variable
    (and with a wrong one): the default must not depend on this test run."""
    env = {k: v for k, v in os.environ.items() if k != "MESSAGECENTER_DIGEST_DEFAULT"}
    code = "import config.settings.base as s; print(s.MESSAGECENTER_DIGEST_DEFAULT)"
    root = Path(__file__).resolve().parents[2]

    def load(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        # Our own interpreter on a fixed snippet: nothing untrusted runs.
        command = [sys.executable, "-c", code]
        return subprocess.run(command, env=env, cwd=root, capture_output=True, text=True, check=False)  # noqa: S603

    shipped = load(env)
    assert shipped.returncode == 0, shipped.stderr
    assert shipped.stdout.strip().splitlines()[-1] == "daily"
    for value, expected in (("Weekly", "weekly"), (" off ", "off")):
        chosen = {**env, "MESSAGECENTER_DIGEST_DEFAULT": value}
        run = load(chosen)
        assert run.stdout.strip().splitlines()[-1] == expected, run.stderr
    wrong = {**env, "MESSAGECENTER_DIGEST_DEFAULT": "hourly"}
    refused = load(wrong)
    assert refused.returncode != 0
    assert "MESSAGECENTER_DIGEST_DEFAULT must be off, daily or weekly" in refused.stderr


def test_nothing_old_and_unread_sends_nothing(mailbox: Mailbox, clock: Clock, operator: Any, recipient: Any) -> None:
    _digest(recipient, "daily")
    send(operator, to={"users": [recipient]}, title="Fresh")
    clock.advance(hours=2)
    run = digests.digests_send()
    assert (run.sent, run.empty) == (0, 1)
    assert mailbox.messages == []


def test_unsubscribe_link_confirms_then_turns_the_digest_off(
    mailbox: Mailbox, clock: Clock, operator: Any, recipient: Any
) -> None:
    _digest(recipient, "weekly")
    send(operator, to={"users": [recipient]}, title="Something to read")
    clock.advance(days=2)
    digests.digests_send()
    [mail] = mailbox.to(recipient)
    path = urlsplit(str(mail["List-Unsubscribe"]).strip()[1:-1]).path
    client = Client(enforce_csrf_checks=True)

    page = client.get(path)
    assert page.status_code == 200
    assert b'method="post"' in page.content
    assert UserPreferences.objects.get(user=recipient).email_digest == "weekly"

    # What a mail client sends (RFC 8058): no session, no CSRF token.
    done = client.post(path, data="List-Unsubscribe=One-Click", content_type="application/x-www-form-urlencoded")
    assert done.status_code == 200
    assert UserPreferences.objects.get(user=recipient).email_digest == "off"
    assert client.post(path).status_code == 200  # twice is fine

    clock.advance(days=8)
    assert digests.digests_send().sent == 0


def test_a_tampered_token_is_400_and_changes_nothing(mailbox: Mailbox, recipient: Any, other_recipient: Any) -> None:
    _digest(recipient, "daily")
    token = digests.digest_unsubscribe_token(user_id=recipient.pk)
    forged = token.replace(token[-3:], "AAA" if token[-3:] != "AAA" else "BBB")
    other = digests.digest_unsubscribe_token(user_id=other_recipient.pk)
    # A token's payload swapped onto another signature.
    spliced = other.split(":")[0] + ":" + ":".join(token.split(":")[1:])
    client = Client(enforce_csrf_checks=True)
    for bad in (forged, spliced, "nonsense", token + "x"):
        assert client.get(f"/email/unsubscribe/{bad}/").status_code == 400
        assert client.post(f"/email/unsubscribe/{bad}/").status_code == 400
    assert UserPreferences.objects.get(user=recipient).email_digest == "daily"
    assert client.put(f"/email/unsubscribe/{token}/").status_code == 405


def test_a_refused_address_does_not_stop_the_others_and_is_counted(
    mailbox: Mailbox, clock: Clock, operator: Any, settings: Any
) -> None:
    settings.MESSAGECENTER_DIGEST_BATCH = 2  # the refused user sits in the first of several batches
    users = [UserFactory(username=f"batch{n}") for n in range(5)]
    for user in users:
        _digest(user, "daily")
    send(operator, to={"users": users}, title="Old item")
    clock.advance(days=1, minutes=1)
    mailbox.refuse.add(users[1].email)
    before = _failures()

    run = digests.digests_send()

    assert (run.sent, run.failed) == (4, 1)
    assert sorted(m["To"] for m in mailbox.messages) == sorted(u.email for u in users if u != users[1])
    assert _failures() == before + 1
    # The failed user's period was given back: the next run tries again.
    assert UserPreferences.objects.get(user=users[1]).last_digest_at is None
    mailbox.refuse.clear()
    clock.advance(minutes=15)
    assert digests.digests_send().sent == 1
    assert len(mailbox.to(users[1])) == 1


def test_digest_speaks_the_site_language(
    mailbox: Mailbox, clock: Clock, operator: Any, recipient: Any, settings: Any
) -> None:
    settings.LANGUAGE_CODE = "zh-hans"
    _digest(recipient, "daily")
    send(operator, to={"users": [recipient]}, title="Old item")
    clock.advance(days=1, minutes=1)
    digests.digests_send()
    [mail] = mailbox.to(recipient)
    assert mail["Subject"] == "您的每日收件箱摘要"
    text, html = _parts(mail)
    assert "停止接收这些邮件" in text
    assert "停止接收这些邮件" in html


# Two runs on two connections at once: SQLite's in-memory test database locks
# whole tables across connections ("database table is locked"), PostgreSQL
# locks the rows the claim takes.
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_runs_at_once_send_one_digest_per_user(
    mailbox: Mailbox, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    operator = UserFactory(username="olga")
    users = [UserFactory(username=f"race{n}") for n in range(3)]
    for user in users:
        _digest(user, "daily")
    send(operator, to={"users": users}, title="Old item")
    # On a busy machine a delivery may be left to the relay: finish it now, so
    # the race below is about the claims alone.
    delivery.delivery_relay(inline=True, due_only=False)
    assert [inbox_counts(user=user)["unread"] for user in users] == [1, 1, 1]
    clock.advance(days=1, minutes=1)
    # Both runs have listed the due users before either claims one: the race is real.
    barrier = threading.Barrier(2, timeout=20)
    claim = digests._claim
    waited: set[int] = set()

    def claim_after_both_listed(**kwargs: Any) -> bool:
        ident = threading.get_ident()
        if ident not in waited:
            waited.add(ident)
            barrier.wait()
        return claim(**kwargs)

    monkeypatch.setattr(digests, "_claim", claim_after_both_listed)
    runs: list[digests.DigestRun] = []

    def run() -> None:
        try:
            runs.append(digests.digests_send())
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(runs) == 2
    assert sum(r.sent for r in runs) == 3
    assert sorted(m["To"] for m in mailbox.messages) == sorted(u.email for u in users)


def test_digest_reads_postgresql_when_redis_is_down(
    mailbox: Mailbox, clock: Clock, operator: Any, recipient: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _digest(recipient, "daily")
    send(operator, to={"users": [recipient]}, title="Still listed without Redis")
    send(operator, to={"users": [recipient]}, category="promotion", title="Muted promotion")
    services.preferences_update(user=recipient, muted_categories=["promotion"])
    clock.advance(days=1, minutes=1)
    dead = redis_lib.Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.2, socket_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )
    for module in (core.lua, scripts, readmodel_inbox, publish):
        monkeypatch.setattr(module, "get_redis", lambda: dead)

    assert digests.digests_send().sent == 1
    [mail] = mailbox.to(recipient)
    text, html = _parts(mail)
    assert "Still listed without Redis" in text
    assert "Still listed without Redis" in html
    assert "Muted promotion" not in text + html


def test_the_demo_data_mails_nobody_at_start(mailbox: Mailbox, clock: Clock, settings: Any) -> None:
    """make run's demo users never chose: under the default they follow daily,
    but the demo items are new, so a first run finds nothing old to mail."""
    settings.MESSAGECENTER_DIGEST_DEFAULT = "daily"
    call_command("seed_demo", stdout=StringIO())
    run = digests.digests_send()
    assert (run.sent, run.failed) == (0, 0)
    assert run.empty >= 3  # alice, bob and carol were looked at
    assert mailbox.messages == []
