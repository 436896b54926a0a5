"""Web Push for the signed-in user: the server's public key and the user's
push subscriptions (``/api/v1/push/public-key/``, ``/api/v1/me/push-subscriptions/``)."""

from typing import cast

from django.contrib.auth.models import AbstractBaseUser
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.fields import OffsetDateTimeField, StrictCharField, StrictInputSerializer
from core.api.openapi import ERRORS
from messagecenter import channel_selectors, services
from messagecenter.webpush import MAX_ENDPOINT_LENGTH, vapid_key


def _user(request: Request) -> AbstractBaseUser:
    # IsAuthenticated (the default permission) ran first: never anonymous here.
    return cast(AbstractBaseUser, request.user)


class PushPublicKeyApi(APIView):
    """The VAPID application server key browsers subscribe with (RFC 8292)."""

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]

    class OutputSerializer(serializers.Serializer):
        public_key = serializers.CharField(
            help_text="The uncompressed P-256 public key, base64url: PushManager.subscribe's applicationServerKey."
        )

    @extend_schema(
        operation_id="push_public_key",
        summary="The Web Push (VAPID) public key",
        auth=[],
        responses={200: OutputSerializer, **ERRORS()},
    )
    def get(self, request: Request) -> Response:
        return Response(self.OutputSerializer({"public_key": vapid_key().public_key}).data)


class PushSubscriptionSerializer(serializers.Serializer):
    id = serializers.CharField()
    endpoint = serializers.CharField()
    created_at = OffsetDateTimeField()


class PushKeysSerializer(StrictInputSerializer):
    p256dh = StrictCharField(max_length=200, help_text="The browser's P-256 public key (base64url).")
    auth = StrictCharField(max_length=100, help_text="The browser's 16-byte auth secret (base64url).")


class PushSubscriptionsApi(APIView):
    class InputSerializer(StrictInputSerializer):
        endpoint = StrictCharField(max_length=MAX_ENDPOINT_LENGTH, help_text="The push service's https URL.")
        keys = PushKeysSerializer()
        expirationTime = serializers.FloatField(
            required=False, allow_null=True, help_text="As the browser gives it; not used."
        )

    class CreatedSerializer(serializers.Serializer):
        id = serializers.CharField()
        endpoint = serializers.CharField()
        created_at = OffsetDateTimeField()

    class ListSerializer(serializers.Serializer):
        results = PushSubscriptionSerializer(many=True)

    @extend_schema(
        operation_id="me_push_subscriptions_list",
        summary="The user's push devices, newest first",
        responses={200: ListSerializer, **ERRORS(401)},
    )
    def get(self, request: Request) -> Response:
        rows = channel_selectors.push_subscriptions_of(user_id=int(_user(request).pk))
        return Response(self.ListSerializer({"results": rows}).data)

    @extend_schema(
        operation_id="me_push_subscriptions_create",
        summary="Save this browser's push subscription",
        description="The body is the browser's `PushSubscription.toJSON()`. 201 for a new endpoint; the same "
        "endpoint again answers 200 with the same id. An endpoint that is not https, or keys that are not a "
        "P-256 public point and a 16-byte secret, is 400.",
        request=InputSerializer,
        responses={201: CreatedSerializer, 200: CreatedSerializer, **ERRORS(400, 401)},
        examples=[
            OpenApiExample(
                "A browser's subscription",
                value={
                    "endpoint": "https://push.example.net/wpush/v2/gAAAAABh",
                    "expirationTime": None,
                    "keys": {
                        "p256dh": "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-"
                        "AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
                        "auth": "BTBZMqHH6r4Tts7J_aSIgg",
                    },
                },
                request_only=True,
            )
        ],
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        subscription, created = services.push_subscription_save(
            user=_user(request),
            endpoint=data["endpoint"],
            keys=dict(data["keys"]),
            user_agent=str(request.headers.get("User-Agent", "")),
        )
        answer = self.CreatedSerializer(subscription).data
        return Response(answer, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class PushSubscriptionApi(APIView):
    @extend_schema(
        operation_id="me_push_subscription_delete",
        summary="Remove one of the user's push devices",
        description="Anyone else's id is a 404.",
        responses={204: None, **ERRORS(400, 401, 404)},
    )
    def delete(self, request: Request, subscription_id: int) -> Response:
        services.push_subscription_delete(user=_user(request), subscription_id=int(subscription_id))
        return Response(status=status.HTTP_204_NO_CONTENT)
