"""The accounts API: sign-in for a token, the caller's tokens and profile, a user's platforms."""

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.exceptions import NotAuthenticated
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import TokenAuthentication
from accounts.platforms import ALL_PLATFORMS
from accounts.selectors import user_platforms
from accounts.services import user_set_platforms
from accounts.tokens import TokenAuth, token_issue, token_revoke, tokens_of
from audit.trail import audit_api
from core.api.errors import NotFound, TooManyAttempts
from core.api.fields import OffsetDateTimeField, StrictCharField, StrictInputSerializer
from core.api.openapi import ERRORS
from core.api.permissions import IsOperator


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
    required_permissions = ("accounts.change_userplatform",)

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
