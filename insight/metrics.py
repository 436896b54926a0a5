"""Prometheus metrics: ``GET /metrics`` (prometheus-client's text format).

Two kinds of metric:

- Counted in the process (request latency, webhook and email failures, live
  streams). Under gunicorn every worker counts its own: set
  ``PROMETHEUS_MULTIPROC_DIR`` to an empty directory (the same for every
  worker, emptied before the server starts) and prometheus-client keeps the
  values in files there, which a scrape of any worker adds up. Without it
  (one process: ``runserver``, uvicorn with one worker) the values live in
  memory.
- Read at scrape time from PostgreSQL and this process (outbox depth,
  pending deliveries and the age of the oldest, pending webhooks, the Redis
  breaker): ``StateCollector``. The apps name what only they can count on
  their AppConfig (``gauges``, a sequence of ``State``; ``core.contributions``),
  since ``core`` knows no app.

Labels stay few: the URL pattern (never the path with its ids), the method
and the status class.
"""

import hmac
import ipaddress
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from prometheus_client import REGISTRY as PROCESS_REGISTRY
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from core import breaker
from core.contributions import contributed_each
from durability.models import OutboxEntry

REQUEST_LATENCY = Histogram(
    "messagecenter_http_request_duration_seconds",
    "Time to answer a request, per URL pattern, method and status class.",
    ["route", "method", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
WEBHOOK_FAILURES = Counter(
    "messagecenter_webhook_failures", "Webhook delivery attempts that failed, per event.", ["event"]
)
EMAIL_FAILURES = Counter("messagecenter_email_failures", "Emails the backend refused or failed to send.")
CHANNEL_SENDS = Counter(
    "messagecenter_channel_deliveries",
    "What the channels beyond the inbox did, per channel (web_push, email) and outcome: sent, "
    "failed, retrying, skipped_read (read, archived or deleted before the e-mail), deferred "
    "(the user's digest choice or the hourly cap).",
    ["channel", "outcome"],
)
LIVE_STREAMS = Gauge(
    "messagecenter_live_streams",
    "Live inbox event streams open now.",
    multiprocess_mode="livesum",
)
LIVE_DROPPED = Counter(
    "messagecenter_live_streams_dropped",
    "Live streams the process's hub dropped because their client fell a whole backlog of events "
    "behind (they end with a resync event and reconnect).",
)

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


# --- Request latency ----------------------------------------------------------------


def _observe(request: HttpRequest, response: HttpResponseBase, started: float) -> None:
    match = getattr(request, "resolver_match", None)
    route = match.route if match is not None and match.route else "unmatched"
    observe_request(route=route, method=str(request.method), status=response.status_code, started=started)


def observe_request(*, route: str, method: str, status: int, started: float) -> None:
    """One answered request."""
    method = method if method in METHODS else "other"
    REQUEST_LATENCY.labels(route=route, method=method, status=f"{status // 100}xx").observe(
        time.perf_counter() - started
    )


class RequestMetricsMiddleware:
    """Times every request. A streaming answer is timed to its first byte."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        started = time.perf_counter()
        response = self.get_response(request)
        _observe(request, response, started)
        return response


# --- State read at scrape time --------------------------------------------------------


@dataclass(frozen=True)
class State:
    """A gauge read at every scrape (``read`` returns its value now)."""

    name: str
    documentation: str
    read: Callable[[], float]


class StateCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        base = [
            State(
                "messagecenter_redis_breaker_open",
                "1 while this process's Redis circuit breaker is open (Redis failed moments ago).",
                lambda: 1.0 if breaker.any_open() else 0.0,
            ),
            State(
                "messagecenter_outbox_depth",
                "Read-model writes waiting in the outbox for Redis.",
                lambda: float(OutboxEntry.objects.count()),
            ),
        ]
        for state in [*base, *contributed_each("gauges")]:
            family = GaugeMetricFamily(state.name, state.documentation)
            family.add_metric([], state.read())
            yield family


# --- The endpoint ------------------------------------------------------------------


def _error(status: int, code: str, message: str) -> JsonResponse:
    response = JsonResponse({"error": {"code": code, "message": message}}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


def _address_allowed(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    for entry in settings.METRICS_ALLOWED_IPS:
        try:
            if ip in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


def metrics_access(request: HttpRequest) -> JsonResponse | None:
    """None when the caller may scrape; otherwise the refusal (401 without a
    token when one is configured, 403 for a wrong token or address)."""
    token = str(settings.METRICS_TOKEN)
    header = request.headers.get("Authorization", "")
    if token and header.startswith("Bearer "):
        if hmac.compare_digest(header.removeprefix("Bearer ").strip().encode(), token.encode()):
            return None
        return _error(403, "permission_denied", "Wrong metrics token.")
    if _address_allowed(request.META.get("REMOTE_ADDR", "")):
        return None
    if token and not header:
        return _error(401, "not_authenticated", "A bearer token is required.")
    return _error(403, "permission_denied", "Metrics are not open to this client.")


def metrics_text() -> bytes:
    """Everything in the text exposition format: the counted metrics (of every
    worker in multiprocess mode), then the state read now."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        counted = CollectorRegistry()
        multiprocess.MultiProcessCollector(counted)
    else:
        counted = PROCESS_REGISTRY
    state = CollectorRegistry(auto_describe=False)
    state.register(StateCollector())
    return generate_latest(counted) + generate_latest(state)


def metrics_view(request: HttpRequest) -> HttpResponse:
    refused = metrics_access(request)
    if refused is not None:
        return refused
    return HttpResponse(metrics_text(), content_type=CONTENT_TYPE_LATEST)
