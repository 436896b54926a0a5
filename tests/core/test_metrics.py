"""GET /metrics: refused without the token or an allowed address, the metric
names present, values moving after requests and state changes, and
gunicorn's multiprocess mode adding up what several processes counted."""

import os
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from core import metrics
from core.models import OutboxEntry
from messagecenter.models import PendingDelivery
from tests.conftest import ROOT, assert_error

pytestmark = pytest.mark.django_db

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


def test_webhook_failures_counter_moves(scraper: APIClient) -> None:
    before = _value(_scrape(scraper), "messagecenter_webhook_failures_total", event="delivery.failed")
    metrics.WEBHOOK_FAILURES.labels(event="delivery.failed").inc()
    after = _value(_scrape(scraper), "messagecenter_webhook_failures_total", event="delivery.failed")
    assert after == before + 1


CHILD = """
import django
django.setup()
from core import metrics
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
