"""The Prometheus endpoint."""

from typing import Any, cast

from django.http import HttpRequest, HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from core.api.openapi import ERRORS
from insight import metrics


class MetricsApi(APIView):
    """Prometheus scrape: ``Authorization: Bearer <METRICS_TOKEN>`` or an address in METRICS_ALLOWED_IPS."""

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    throttle_classes: list[Any] = []

    def perform_content_negotiation(self, request: Request, force: bool = False) -> tuple[Any, str]:
        # Scrapers ask for text or OpenMetrics: never a 406 over the Accept header.
        renderer = JSONRenderer()
        return renderer, renderer.media_type

    @extend_schema(
        operation_id="metrics",
        summary="Prometheus metrics (text exposition format)",
        auth=[],
        responses={
            (200, "text/plain"): OpenApiResponse(OpenApiTypes.STR, description="Prometheus text format 0.0.4."),
            **ERRORS(401, 403),
        },
    )
    def get(self, request: Request) -> HttpResponse:
        # DRF's Request answers every attribute of the HttpRequest it wraps
        # (https://www.django-rest-framework.org/api-guide/requests/#standard-httprequest-attributes);
        # the view reads the headers and META only.
        return metrics.metrics_view(cast(HttpRequest, request))
