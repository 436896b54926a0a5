"""GET /metrics: refused without the token or an allowed address, the metric
names present, values moving when what they count happens (requests, a
tripped Redis breaker, live streams opened and closed, webhook and e-mail
failures, rows waiting in PostgreSQL), and gunicorn's multiprocess mode
adding up what several processes counted."""

import asyncio
import os
import socket
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
import redis as redis_lib
from django.test import Client
from django.utils import timezone
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from redis.backoff import NoBackoff
from redis.retry import Retry
from rest_framework.test import APIClient

from core import breaker
from core.breaker import BreakerConnection, reset_breakers
from durability.models import OutboxEntry
from insight import metrics
from messagecenter import live, services
from messagecenter.models import PendingDelivery
from messagecenter.services import digests
from tests.conftest import ROOT, assert_error
from tests.core.test_breaker import BreakerClock
from webhooks import services as webhooks
from webhooks.models import WebhookDelivery

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "s3cret-scrape-token"
NAMES = {
    "messagecenter_http_request_duration_seconds",
    "messagecenter_webhook_failures",
    "messagecenter_email_failures",
    "messagecenter_live_streams",
    "messagecenter_redis_breaker_open",
    "messagecenter_outbox_depth",
    "messagecenter_pending_deliveries",
    "messagecenter_fanout_lag_seconds",
    "messagecenter_webhook_pending",
    "messagecenter_webhook_oldest_pending_age_seconds",
}


def _scrape(client: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def scraper(settings: Any) -> APIClient:
    settings.METRICS_TOKEN = TOKEN
    settings.METRICS_ALLOWED_IPS = []
    return APIClient()


def test_refused_without_token_or_address(settings: Any) -> None:
    client = APIClient()
    settings.METRICS_TOKEN = ""
    settings.METRICS_ALLOWED_IPS = []
    assert_error(client.get("/metrics"), 403)  # nothing configured: closed
    settings.METRICS_TOKEN = TOKEN
    response = client.get("/metrics")
    assert_error(response, 401)
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert_error(client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong"), 403)
    assert_error(client.get("/metrics", HTTP_AUTHORIZATION=f"Token {TOKEN}"), 403)
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
    # An address allow-list (the test client comes from 127.0.0.1).
    settings.METRICS_TOKEN = ""
    settings.METRICS_ALLOWED_IPS = ["10.0.0.0/8"]
    assert_error(client.get("/metrics"), 403)
    settings.METRICS_ALLOWED_IPS = ["10.0.0.0/8", "127.0.0.1"]
    assert client.get("/metrics").status_code == 200


def test_names_present_and_moving(scraper: APIClient, recipient_client: Any) -> None:
    metrics.WEBHOOK_FAILURES.labels(event="message.sent")  # a labelled counter shows once it has a child
    before = _scrape(scraper)
    names = {name for name, _ in before}
    assert {n for n in NAMES if not any(x.startswith(n) for x in names)} == set()

    route = {"route": "api/v1/inbox/", "method": "GET", "status": "2xx"}
    count_before = _value(before, "messagecenter_http_request_duration_seconds_count", **route)
    for _ in range(3):
        assert recipient_client.get("/api/v1/inbox/").status_code == 200
    assert_error(recipient_client.get("/api/v1/inbox/m999999/"), 404)
    after = _scrape(scraper)
    assert _value(after, "messagecenter_http_request_duration_seconds_count", **route) == count_before + 3
    item_route = {"route": "api/v1/inbox/<str:item_id>/", "method": "GET", "status": "4xx"}
    assert _value(after, "messagecenter_http_request_duration_seconds_count", **item_route) >= 1
    # Low cardinality: the pattern, never the path with its id.
    assert not any("m999999" in str(labels) for _, labels in after)


def test_state_gauges_follow_postgresql(scraper: APIClient) -> None:
    before = _scrape(scraper)
    assert _value(before, "messagecenter_outbox_depth") == 0
    assert _value(before, "messagecenter_pending_deliveries") == 0
    assert _value(before, "messagecenter_fanout_lag_seconds") == 0
    OutboxEntry.objects.create(topic="t", payload={})
    PendingDelivery.objects.create(task="messagecenter.message_deliver", object_id=1, due_at=timezone.now())
    PendingDelivery.objects.update(created_at=timezone.now() - timedelta(seconds=30))
    after = _scrape(scraper)
    assert _value(after, "messagecenter_outbox_depth") == 1
    assert _value(after, "messagecenter_pending_deliveries") == 1
    assert 29 < _value(after, "messagecenter_fanout_lag_seconds") < 120


def _free_port() -> int:
    """A loopback port nothing listens on (a connection to it is refused at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


BREAKER = "messagecenter_redis_breaker_open"
COOLDOWN = 0.5


def test_breaker_gauge_follows_a_real_trip(scraper: APIClient, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = BreakerClock()
    monkeypatch.setattr(breaker, "clock", clock)
    reset_breakers()
    assert _value(_scrape(scraper), BREAKER) == 0
    pool = redis_lib.ConnectionPool(
        host="127.0.0.1",
        port=_free_port(),
        connection_class=BreakerConnection,
        breaker_cooldown=COOLDOWN,
        socket_connect_timeout=0.2,
        socket_timeout=0.2,
        retry=Retry(NoBackoff(), 0),
    )
    dead = redis_lib.Redis(connection_pool=pool)
    try:
        with pytest.raises(redis_lib.ConnectionError):
            dead.ping()  # refused: the breaker of that server opens
        assert _value(_scrape(scraper), BREAKER) == 1
        clock.advance(COOLDOWN - 0.1)
        assert _value(_scrape(scraper), BREAKER) == 1  # still within the cooldown
        clock.advance(0.2)  # the cooldown is over: half-open, no longer reported
        assert _value(_scrape(scraper), BREAKER) == 0
        with pytest.raises(redis_lib.ConnectionError):
            dead.ping()  # the probe fails: open again
        assert _value(_scrape(scraper), BREAKER) == 1
        reset_breakers()  # what an operator does once Redis is fixed
        assert _value(_scrape(scraper), BREAKER) == 0
    finally:
        reset_breakers()
        pool.disconnect()


STREAMS = "messagecenter_live_streams"


@pytest.mark.not_on_cluster(reason="live streams are off on Redis Cluster by design")
def test_live_streams_gauge_counts_open_streams(scraper: APIClient, recipient: Any, settings: Any) -> None:
    settings.MESSAGECENTER_LIVE_STREAM_SECONDS = 60  # open until the test closes them
    settings.MESSAGECENTER_LIVE_HEARTBEAT_SECONDS = 0.2
    base = _value(_scrape(scraper), STREAMS)
    # The blocking stream (WSGI), through the endpoint.
    browser = Client()
    browser.force_login(recipient)
    response = browser.get("/api/v1/inbox/stream/")
    assert response.status_code == 200
    # The view streams: the test client's response type knows only HttpResponse.
    assert next(iter(response.streaming_content)).startswith(b"retry:")  # type: ignore[attr-defined]
    assert _value(_scrape(scraper), STREAMS) == base + 1
    # The async stream (ASGI). Inside the event loop the gauge is read from the
    # registry the endpoint exports (the endpoint's database reads are sync only).

    async def open_and_close() -> list[float | None]:
        seen = [REGISTRY.get_sample_value(STREAMS)]
        stream = live.inbox_event_stream_async(user_id=recipient.pk)
        assert (await anext(stream)).startswith(b"retry:")
        seen.append(REGISTRY.get_sample_value(STREAMS))
        # The iterator is an async generator, which has aclose().
        await stream.aclose()  # type: ignore[attr-defined]
        seen.append(REGISTRY.get_sample_value(STREAMS))
        return seen

    assert asyncio.run(open_and_close()) == [base + 1, base + 2, base + 1]
    assert _value(_scrape(scraper), STREAMS) == base + 1
    response.close()  # the client went away: the blocking stream ends
    assert _value(_scrape(scraper), STREAMS) == base


def test_webhook_metrics_follow_real_deliveries(
    scraper: APIClient, operator_client: Any, recipient: Any, settings: Any
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    settings.WEBHOOK_RETRY_DELAYS = [60.0]
    settings.WEBHOOK_DISABLE_AFTER_FAILURES = 100
    hook = {"url": f"http://127.0.0.1:{_free_port()}/hook", "events": ["message.sent"]}
    assert operator_client.post("/api/v1/manage/webhooks/", hook, format="json").status_code == 201
    failures = ("messagecenter_webhook_failures_total", {"event": "message.sent"})
    before = _scrape(scraper)
    assert _value(before, "messagecenter_webhook_pending") == 0
    assert _value(before, "messagecenter_webhook_oldest_pending_age_seconds") == 0

    body = {"category": "system", "title": "Hi", "body_html": "<p>x</p>", "to": {"users": [recipient.pk]}}
    assert operator_client.post("/api/v1/manage/messages/", body, format="json").status_code == 202
    row = WebhookDelivery.objects.get()
    assert (row.status, row.attempts, row.last_status_code) == ("pending", 1, None)  # refused, retried later
    WebhookDelivery.objects.update(created_at=timezone.now() - timedelta(seconds=90))
    pending = _scrape(scraper)
    assert _value(pending, failures[0], **failures[1]) == _value(before, failures[0], **failures[1]) + 1
    assert _value(pending, "messagecenter_webhook_pending") == 1
    assert 89 < _value(pending, "messagecenter_webhook_oldest_pending_age_seconds") < 300

    WebhookDelivery.objects.update(next_attempt_at=timezone.now())
    assert webhooks.webhook_relay() == 1  # the last attempt fails too: the delivery is failed
    assert WebhookDelivery.objects.get().status == "failed"
    done = _scrape(scraper)
    assert _value(done, failures[0], **failures[1]) == _value(before, failures[0], **failures[1]) + 2
    assert _value(done, "messagecenter_webhook_pending") == 0
    assert _value(done, "messagecenter_webhook_oldest_pending_age_seconds") == 0


def test_email_failures_counted_when_a_digest_cannot_be_sent(
    scraper: APIClient, operator: Any, recipient: Any, settings: Any
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = _free_port()  # no SMTP server: every send is refused
    settings.EMAIL_USE_TLS = False
    settings.EMAIL_USE_SSL = False
    settings.EMAIL_TIMEOUT = 2
    settings.MESSAGECENTER_DIGEST_MIN_AGE_HOURS = 0
    settings.MESSAGECENTER_DIGEST_DEFAULT = "off"
    services.preferences_update(user=recipient, email_digest="daily")
    services.message_send(sender=operator, category="system", title="t", body_html="b", user_ids=[recipient.pk])
    before = _value(_scrape(scraper), "messagecenter_email_failures_total")
    run = digests.digests_send()
    assert (run.sent, run.failed) == (0, 1)
    assert _value(_scrape(scraper), "messagecenter_email_failures_total") == before + 1


CHILD = """
import django
django.setup()
from insight import metrics
metrics.REQUEST_LATENCY.labels(route="api/v1/inbox/", method="GET", status="2xx").observe(0.01)
metrics.EMAIL_FAILURES.inc()
"""


def test_multiprocess_mode_adds_up_workers(scraper: APIClient, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "config.settings.test"}
    env.pop("DATABASE_URL", None)
    for _ in range(2):  # two "workers", each its own process
        subprocess.run([sys.executable, "-c", CHILD], env=env, cwd=ROOT, check=True, timeout=120)  # noqa: S603
    assert list(tmp_path.iterdir())  # their values are in files
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    samples = _scrape(scraper)
    assert _value(samples, "messagecenter_email_failures_total") == 2
    route = {"route": "api/v1/inbox/", "method": "GET", "status": "2xx"}
    assert _value(samples, "messagecenter_http_request_duration_seconds_count", **route) == 2
    assert _value(samples, "messagecenter_outbox_depth") == 0  # state is read all the same
