"""REST adapters of the core app: token, platforms, health."""

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, inline_serializer
from redis.exceptions import RedisError
from rest_framework import serializers, status
from rest_framework.authtoken.models import Token
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core import healing, readmodel
from core.exceptions import TooManyAttempts
from core.fields import StrictCharField, StrictInputSerializer
from core.openapi import ERRORS
from core.permissions import IsOperator
from core.platforms import ALL_PLATFORMS
from core.selectors import user_platforms
from core.services import user_set_platforms


def lockout_seconds() -> int:
    return int(settings.AXES_COOLOFF_TIME.total_seconds())


class TokenObtainApi(APIView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    class InputSerializer(StrictInputSerializer):
        username = StrictCharField(max_length=150)
        password = StrictCharField(max_length=4096, style={"input_type": "password"}, trim_whitespace=False)

    class OutputSerializer(serializers.Serializer):
        token = serializers.CharField()

    @extend_schema(
        operation_id="auth_token_obtain",
        request=InputSerializer,
        responses={200: OutputSerializer, **ERRORS(400, 429)},
        auth=[],
    )
    def post(self, request: Request) -> Response:
        # Types and sizes first (DRF's AuthTokenSerializer would take 123 as a
        # username and hash a megabyte password), then the credentials.
        self.InputSerializer(data=request.data).is_valid(raise_exception=True)
        serializer = AuthTokenSerializer(data=request.data, context={"request": request})
        if not serializer.is_valid():
            # The brute-force limit (django-axes, via the auth backends) flags
            # the request when this username or address is locked out.
            if getattr(request, "axes_locked_out", False):
                raise TooManyAttempts("Too many failed sign-ins; try again later.", retry_after=lockout_seconds())
            raise serializers.ValidationError(serializer.errors)
        token, _ = Token.objects.get_or_create(user=serializer.validated_data["user"])
        return Response({"token": token.key})


class MeApi(APIView):
    """The signed-in user: who they are and which platforms they are on."""

    class OutputSerializer(serializers.Serializer):
        id = serializers.CharField()
        username = serializers.CharField()
        is_staff = serializers.BooleanField()
        platforms = serializers.ListField(child=serializers.CharField())

    @extend_schema(operation_id="me", responses={200: OutputSerializer, **ERRORS(401)})
    def get(self, request: Request) -> Response:
        user = request.user
        data = {
            "id": str(user.pk),
            "username": user.get_username(),
            "is_staff": user.is_staff,
            "platforms": user_platforms(user=user),
        }
        return Response(self.OutputSerializer(data).data)


class UserPlatformsApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("core.change_userplatform",)

    class InputSerializer(StrictInputSerializer):
        platforms = serializers.ListField(
            child=serializers.ChoiceField(choices=ALL_PLATFORMS), allow_empty=False, max_length=len(ALL_PLATFORMS) * 4
        )

    class OutputSerializer(serializers.Serializer):
        user_id = serializers.CharField()
        platforms = serializers.ListField(child=serializers.CharField())

    @extend_schema(
        operation_id="manage_user_platforms_set",
        request=InputSerializer,
        responses={200: OutputSerializer, **ERRORS(400, 401, 403, 404)},
    )
    def put(self, request: Request, user_id: int) -> Response:
        user = get_object_or_404(get_user_model(), pk=user_id)  # an absent user is 404 whatever the body
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        platforms = user_set_platforms(user=user, platforms=serializer.validated_data["platforms"])
        return Response(self.OutputSerializer({"user_id": str(user.pk), "platforms": platforms}).data)


def health_status() -> tuple[dict[str, Any], int]:
    """PostgreSQL must answer; Redis may be down (the project serves degraded), or
    answer without its read model: "rebuilding" (still 200, served from
    PostgreSQL meanwhile), with the rebuild's progress under "rebuild"."""
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
                            "stage": serializers.CharField(),
                            "done": serializers.IntegerField(),
                            "total": serializers.IntegerField(),
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
