"""REST adapters of the core app: token, platforms, health."""

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema, inline_serializer
from redis.exceptions import RedisError
from rest_framework import serializers, status
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.exceptions import NotAuthenticated
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core import healing, readmodel
from core.api.pages import list_response
from core.audit import audit_api, audit_csv
from core.authentication import TokenAuthentication
from core.exceptions import NotFound, TooManyAttempts, ValidationFailed
from core.fields import OffsetDateTimeField, StrictCharField, StrictInputSerializer
from core.openapi import ERRORS, example, filter_parameter, list_parameters, page_serializer
from core.params import parse_text, parse_time
from core.permissions import IsOperator
from core.platforms import ALL_PLATFORMS
from core.selectors import audit_list, user_platforms
from core.services import user_set_platforms
from core.tokens import TokenAuth, token_issue, token_revoke, tokens_of


def lockout_seconds() -> int:
    return int(settings.AXES_COOLOFF_TIME.total_seconds())


class TokenObtainApi(APIView):
    """Sign in for a token (``POST``: a new one per sign-in) and sign this
    device out (``DELETE``: the token the request is signed with)."""

    permission_classes = [AllowAny]

    class InputSerializer(StrictInputSerializer):
        username = StrictCharField(max_length=150)
        password = StrictCharField(max_length=4096, style={"input_type": "password"}, trim_whitespace=False)

    class OutputSerializer(serializers.Serializer):
        token = serializers.CharField()
        expires_at = OffsetDateTimeField()

    def get_authenticators(self) -> list[Any]:
        # Signing in presents credentials, not a token: a stale Authorization
        # header must not refuse it. Signing out needs the token itself.
        # (``self.request`` is Django's request here: View.setup sets it; the
        # schema generator builds the view without one.)
        request = getattr(self, "request", None)
        if request is not None and request.method == "POST":
            return []
        return [TokenAuthentication()]

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
        issued = token_issue(user=serializer.validated_data["user"])
        return Response(self.OutputSerializer({"token": issued.token, "expires_at": issued.row.expires_at}).data)

    @extend_schema(operation_id="auth_token_revoke", request=None, responses={204: None, **ERRORS(401)})
    def delete(self, request: Request) -> Response:
        if not isinstance(request.auth, TokenAuth) or not request.user.is_authenticated:
            raise NotAuthenticated()
        token_revoke(user_id=request.user.pk or 0, token_id=request.auth.id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MyTokensApi(APIView):
    """The caller's API tokens (never the tokens themselves)."""

    class OutputSerializer(serializers.Serializer):
        id = serializers.CharField()
        created_at = OffsetDateTimeField()
        expires_at = OffsetDateTimeField()
        last_used_at = OffsetDateTimeField(allow_null=True)
        current = serializers.BooleanField()

    @extend_schema(
        operation_id="me_tokens_list",
        responses={
            200: inline_serializer("TokenList", {"results": OutputSerializer(many=True)}),
            **ERRORS(401),
        },
    )
    def get(self, request: Request) -> Response:
        current = request.auth.id if isinstance(request.auth, TokenAuth) else None
        rows = [
            {
                "id": str(row.pk),
                "created_at": row.created_at,
                "expires_at": row.expires_at,
                "last_used_at": row.last_used_at,
                "current": row.pk == current,
            }
            for row in tokens_of(user_id=request.user.pk or 0)
        ]
        return Response({"results": self.OutputSerializer(rows, many=True).data})


class MyTokenApi(APIView):
    @extend_schema(operation_id="me_token_revoke", request=None, responses={204: None, **ERRORS(401, 404)})
    def delete(self, request: Request, token_id: int) -> Response:
        if not token_revoke(user_id=request.user.pk or 0, token_id=token_id):
            raise NotFound("No such token.")
        return Response(status=status.HTTP_204_NO_CONTENT)


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
        with transaction.atomic():
            platforms = user_set_platforms(user=user, platforms=serializer.validated_data["platforms"])
            audit_api(request, action="platforms_set", obj=user, changes={"platforms": platforms})
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


class AuditEntrySerializer(serializers.Serializer):
    """One audit entry (OpenAPI component ``AuditEntry``)."""

    id = serializers.CharField()
    actor = serializers.CharField(source="actor_name", help_text="Username of the operator; empty for none.")
    action = serializers.CharField(help_text="create, update, delete, or a named action (publish, members_add, ...)")
    object_type = serializers.CharField(help_text="app_label.model, e.g. messagecenter.message")
    object_id = serializers.CharField()
    object_repr = serializers.CharField()
    at = OffsetDateTimeField()
    changes = serializers.JSONField(help_text="What the write changed (long values cut).")
    via = serializers.ChoiceField(source="source", choices=["api", "admin"], help_text="Where the write came in.")
    path = serializers.CharField()
    ip = serializers.CharField(allow_null=True)


_AUDIT_EXAMPLE = {
    "id": "41",
    "actor": "olivia-operator",
    "action": "create",
    "object_type": "messagecenter.message",
    "object_id": "311",
    "object_repr": "Maintenance tonight",
    "at": "2026-11-22T10:00:00+00:00",
    "changes": {"title": "Maintenance tonight", "category": "system"},
    "via": "api",
    "path": "/api/v1/manage/messages/",
    "ip": "203.0.113.7",
}


AUDIT_FILTERS = list_parameters(
    filter_parameter("actor", "Only entries of this operator (username)."),
    filter_parameter("action", "Only this action (create, update, delete, publish, members_add, ...)."),
    filter_parameter("object_type", "Only this type (app_label.model, e.g. messagecenter.message)."),
    filter_parameter("object_id", "Only entries about this object id (with object_type)."),
)
# The export is one response, not a page: bounded so it stays one.
AUDIT_EXPORT_MAX = 50_000


class AuditListApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("core.view_auditentry",)

    @extend_schema(
        operation_id="manage_audit_list",
        summary="The audit log of operator writes",
        description="Every operator write through the manage API or Django admin, newest first.",
        parameters=AUDIT_FILTERS,
        responses={200: page_serializer("AuditPage", AuditEntrySerializer), **ERRORS(400, 401, 403)},
        examples=[example("A page", {"results": [_AUDIT_EXAMPLE], "next_cursor": None})],
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        return list_response(
            request,
            audit_list,
            lambda rows: AuditEntrySerializer(rows, many=True).data,
            actor=parse_text(params.get("actor"), name="actor", max_length=150),
            action=parse_text(params.get("action"), name="action", max_length=64),
            object_type=parse_text(params.get("object_type"), name="object_type", max_length=100),
            object_id=parse_text(params.get("object_id"), name="object_id", max_length=64),
            since=parse_time(params.get("since"), name="since"),
        )


class AuditExportApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("core.view_auditentry",)

    @extend_schema(
        operation_id="manage_audit_export",
        summary="The audit log as CSV",
        description=f"The entries the filters select, newest first, at most {AUDIT_EXPORT_MAX} rows "
        "(narrow with `since` for more).",
        parameters=[p for p in AUDIT_FILTERS if p.name not in {"limit", "cursor"}],
        responses={
            (200, "text/csv"): OpenApiResponse(
                OpenApiTypes.STR,
                description="One header row, then one row per entry.",
                examples=[
                    OpenApiExample(
                        "CSV",
                        value="id,at,actor,action,object_type,object_id,object_repr,source,path,ip,changes\r\n"
                        "41,2026-11-22T10:00:00+00:00,olivia-operator,create,messagecenter.message,311,"
                        'Maintenance tonight,api,/api/v1/manage/messages/,203.0.113.7,"{""title"": ""Hi""}"\r\n',
                    )
                ],
            ),
            **ERRORS(400, 401, 403),
        },
    )
    def get(self, request: Request) -> HttpResponse:
        params = request.query_params
        page = audit_list(
            limit=AUDIT_EXPORT_MAX,
            cursor=None,
            actor=parse_text(params.get("actor"), name="actor", max_length=150),
            action=parse_text(params.get("action"), name="action", max_length=64),
            object_type=parse_text(params.get("object_type"), name="object_type", max_length=100),
            object_id=parse_text(params.get("object_id"), name="object_id", max_length=64),
            since=parse_time(params.get("since"), name="since"),
        )
        response = HttpResponse(audit_csv(page.items), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="audit.csv"'
        return response


class MalformedIdApi(APIView):
    """``<resource>/<not an id>/``: the id routes match only well-formed ids.

    Whatever the method, a malformed id is a 400 that names the problem (the
    client sent something that was never an id). Digits past any row's range
    are an id no row can have: 404. The permission check runs first, so the
    answer says nothing to whoever may not use the route; the user-facing
    routes pass their own ``permission_classes`` to ``as_view``.
    """

    permission_classes = [IsOperator]
    schema = None  # not an operation of its own: the id routes document the paths

    def _refuse(self, request: Request, raw: str, *args: Any, **kwargs: Any) -> Response:
        if raw.isascii() and raw.isdigit() and not raw.startswith("0"):
            raise NotFound("No such object.")
        raise ValidationFailed(
            "The id in the path is malformed: an id is a positive integer.",
            code="invalid_id",
            fields={"id": ["Must be a positive integer."]},
        )

    get = post = put = patch = delete = _refuse
