"""Channels beyond the inbox: the e-mail escalation scan over a broadcast's
recipients, and the Web Push fan-out through a local push service.

Escalation: one message to 100,000 users (quick: the run's users) asking for
an e-mail after a delay; 90% have read it (their ever-read bits set), the
scan runs once the delay is over. Targets: at most one PostgreSQL query per
1,000 recipients, no Redis call over 5 ms; its duration is stated. E-mails
are rendered and handed to Django's in-memory backend: the time of an SMTP
server is not the scan's.

Push: 10,000 subscriptions, each pushed once (RFC 8291 encryption and a
VAPID signature per push, as the standards require) to a push service on
127.0.0.1 in another process (bench/push_sink.py). The baseline is the
library's own rate alone, measured in the same run: pywebpush's ``webpush()``
called in a loop, one push after another.
"""

import gc
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import redis
from django.contrib.auth import get_user_model
from django.core import mail
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone
from pywebpush import webpush

from bench import data
from bench.harness import Row
from core.redis import get_redis
from messagecenter import keys as mc_keys
from messagecenter.models import ChannelHold, ItemChannels, Message, PushDelivery, PushSubscription
from messagecenter.services.channels import ChannelRequest, channels_email_scan
from messagecenter.services.messages import message_send
from messagecenter.webpush import b64url, vapid_key

ROOT = Path(__file__).resolve().parent.parent.parent
ESCALATION = 100_000
UNREAD_SHARE = 0.10
PUSHES = 10_000
BASELINE_PUSHES = 2_000
# A browser's subscription keys (one pair for every subscription: the
# encryption costs the same whichever key it is for).
P256DH = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
AUTH = "BTBZMqHH6r4Tts7J_aSIgg"


def _reset(low: int, high: int) -> None:
    ItemChannels.objects.all().delete()
    PushDelivery.objects.all().delete()
    PushSubscription.objects.all().delete()
    ChannelHold.objects.all().delete()
    Message.objects.all().delete()
    # The scan mails those with an address: give the crowd one (bench users have none).
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE auth_user SET email = username || '@bench.invalid' WHERE id BETWEEN %s AND %s AND email = ''",
            [low, high],
        )


@contextmanager
def _queries() -> Iterator[list[str]]:
    seen: list[str] = []

    def count(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        yield seen


@contextmanager
def _redis_calls() -> Iterator[list[float]]:
    """The wall time of every Redis call (a command, or a pipeline's execute)."""
    times: list[float] = []
    command, pipeline = redis.Redis.execute_command, redis.client.Pipeline.execute

    def timed(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                times.append(time.perf_counter() - started)

        return call

    redis.Redis.execute_command = timed(command)  # type: ignore[method-assign]
    redis.client.Pipeline.execute = timed(pipeline)  # type: ignore[method-assign]
    try:
        yield times
    finally:
        redis.Redis.execute_command = command  # type: ignore[method-assign]
        redis.client.Pipeline.execute = pipeline  # type: ignore[method-assign]


def _escalation(operator: Any, low: int, recipients: int) -> list[Row]:
    user_ids = list(range(low, low + recipients))
    with transaction.atomic():
        message = message_send(
            sender=operator,
            category="system",
            title="Policy update",
            summary="Please read the new policy.",
            body_html="<p>Policy</p>",
            user_ids=user_ids,
            channels=ChannelRequest(email_after_seconds=3600),
        )
    message.refresh_from_db()
    # 90% read it: their ever-read bit of the message's slot (what a read sets).
    unread = set(user_ids[:: int(1 / UNREAD_SHARE)])
    client = get_redis()
    for start in range(0, recipients, 5_000):
        pipe = client.pipeline(transaction=False)
        for user_id in user_ids[start : start + 5_000]:
            if user_id not in unread:
                pipe.setbit(mc_keys.read_ever_bitmap(user_id, message.slot_month), int(message.slot_offset), 1)
        pipe.execute()
    due = timezone.now() + timedelta(hours=1, seconds=1)
    mail.outbox = []
    with (
        override_settings(EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend"),
        _queries() as queries,
        _redis_calls() as calls,
    ):
        # As bench.harness.measure times: without the collector's pauses.
        gc.disable()
        try:
            started = time.perf_counter()
            run = channels_email_scan(now=due, budget_seconds=3600)
            elapsed = time.perf_counter() - started
        finally:
            gc.enable()
    assert run.sent == len(unread), (run, len(unread))
    per_thousand = len(queries) / (recipients / 1000)
    ordered = sorted(calls) or [0.0]
    slowest = ordered[-1]
    median, p99 = ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    case = f"e-mail escalation scan, {recipients:,} recipients, 10% unread"
    return [
        Row(
            "channels",
            f"{case}: PostgreSQL queries per 1,000 recipients",
            per_thousand,
            "queries",
            "target",
            None,
            at_most=1.0,
            note=f"{len(queries)} queries in all ({run.looked_at:,} recipients in batches of 5,000)",
        ),
        Row(
            "channels",
            f"{case}: slowest Redis call",
            slowest,
            "s",
            "target",
            None,
            p99=p99,
            at_most=0.005,
            note=f"{len(calls)} Redis calls, median {median * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms (read bits: one "
            "bit_get.lua call per user, 50 users a pipeline; the cap's counters, 64 users a pipeline)",
        ),
        Row(
            "channels",
            f"{case}: duration",
            elapsed,
            "s",
            "stated",
            None,
            note=f"{run.sent:,} e-mails rendered and handed to Django's locmem backend, {run.skipped_read:,} skipped "
            f"as read; {recipients / elapsed:,.0f} recipients/s",
        ),
    ]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _push_sink() -> Iterator[str]:
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "bench.push_sink", str(port)], cwd=ROOT)
    origin = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                httpx.get(f"{origin}/count", timeout=1.0)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield origin
    finally:
        process.terminate()
        process.wait(timeout=10)


def _received(origin: str) -> int:
    return int(httpx.get(f"{origin}/count", timeout=5.0).json()["received"])


def _push_fanout(operator: Any, low: int, count: int) -> list[Row]:
    with _push_sink() as origin, override_settings(MESSAGECENTER_PUSH_ALLOW_LOCAL_ENDPOINTS=True):
        now = timezone.now()
        PushSubscription.objects.bulk_create(
            [
                PushSubscription(
                    user_id=low + n, endpoint=f"{origin}/push/{n}", p256dh=P256DH, auth=AUTH, created_at=now
                )
                for n in range(count)
            ],
            batch_size=5_000,
        )
        # The library alone: webpush() in a loop, as its documentation shows it.
        subscription = {"endpoint": f"{origin}/push/baseline", "keys": {"p256dh": P256DH, "auth": AUTH}}
        key = vapid_key()
        private = key.private.private_numbers().private_value.to_bytes(32, "big")
        payload = '{"id":"m1","title":"Order shipped","summary":"It leaves today.","url":"/inbox/m1/"}'
        before = _received(origin)
        started = time.perf_counter()
        for _ in range(BASELINE_PUSHES):
            webpush(
                subscription,
                payload,
                vapid_private_key=b64url(private),
                vapid_claims={"sub": "mailto:bench@example.org"},
                ttl=86400,
            )
        baseline_rate = BASELINE_PUSHES / (time.perf_counter() - started)
        assert _received(origin) - before == BASELINE_PUSHES
        # Ours: one message to the subscribers' users, pushed by its fan-out chunks.
        before = _received(origin)
        started = time.perf_counter()
        with transaction.atomic():
            message = message_send(
                sender=operator,
                category="transaction",
                title="Order shipped",
                summary="It leaves today.",
                body_html="<p>Tracking inside.</p>",
                user_ids=range(low, low + count),
                channels=ChannelRequest(web_push=True),
            )
        elapsed = time.perf_counter() - started
        delivered = _received(origin) - before
    counts = ItemChannels.objects.get(item_id=message.ref)
    assert delivered == count == counts.push_sent, (delivered, count, counts.push_sent)
    return [
        Row(
            "channels",
            f"Web Push fan-out to {count:,} subscriptions (aes128gcm + VAPID, local push service)",
            count / elapsed,
            "/s",
            "pywebpush webpush() in a loop",
            baseline_rate,
            better="higher",
            target=1.0,
            note=f"pushes accepted per second; the send and its fan-out took {elapsed:.2f} s (chunks of 1,000, "
            f"sent together from one event loop, 16 in flight, one VAPID signature per push service an hour); the "
            f"baseline pushed "
            f"{BASELINE_PUSHES:,} one after another",
        )
    ]


def run(*, users: int, quick: bool) -> list[Row]:
    recipients = min(ESCALATION, users)
    low, high = data.ensure_users(max(recipients, PUSHES))
    operator, _ = get_user_model().objects.get_or_create(username="bench-operator", defaults={"is_staff": True})
    get_redis().flushdb()
    _reset(low, high)
    rows = _escalation(operator, low, recipients)
    get_redis().flushdb()
    _reset(low, high)
    rows += _push_fanout(operator, low, min(PUSHES, users))
    return rows
