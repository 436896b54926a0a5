"""REST adapter of the durability app: ``/healthz``."""

from typing import Any

from django.conf import settings
from django.db import connection
from drf_spectacular.utils import extend_schema, inline_serializer
from redis.exceptions import RedisError
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core import readmodel
from durability import healing


def health_status() -> tuple[dict[str, Any], int]:
    """PostgreSQL must answer; Redis may be down (the project serves degraded), or
    answer without its read model: "rebuilding" (still 200, served from
    PostgreSQL meanwhile), with when the rebuild started under "rebuild"."""
    body: dict[str, Any] = {"status": "ok", "database": "ok", "redis": "ok"}
    code: int = status.HTTP_200_OK
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception:
        body["status"], body["database"], code = "error", "down", status.HTTP_503_SERVICE_UNAVAILABLE
    try:
        readmodel.health_probe()
    except RedisError:
        body["redis"] = "down"
        return body, code
    if code == status.HTTP_200_OK:
        try:
            rebuild = healing.health()
        except RedisError:
            body["redis"] = "down"
        else:
            if rebuild is not None:
                body["redis"], body["rebuild"] = "rebuilding", rebuild
    return body, code


class HealthApi(APIView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    throttle_classes: list[Any] = []

    @extend_schema(
        operation_id="healthz",
        responses={
            200: inline_serializer(
                "Health",
                {
                    "status": serializers.CharField(),
                    "database": serializers.CharField(),
                    "redis": serializers.ChoiceField(choices=["ok", "down", "rebuilding"]),
                    "rebuild": inline_serializer(
                        "HealthRebuild",
                        {
                            "started_at": serializers.DateTimeField(allow_null=True),
                            "elapsed_seconds": serializers.FloatField(),
                        },
                        required=False,
                    ),
                },
            ),
            503: inline_serializer(
                "HealthDown",
                {
                    "status": serializers.CharField(),
                    "database": serializers.CharField(),
                    "redis": serializers.CharField(),
                },
            ),
        },
        auth=[],
    )
    def get(self, request: Request) -> Response:
        body, code = health_status()
        headers = {"Retry-After": str(int(settings.DATABASE_RETRY_AFTER_SECONDS))} if code == 503 else None
        return Response(body, status=code, headers=headers)
