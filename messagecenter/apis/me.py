"""The signed-in user's own settings: ``/api/v1/me/preferences/`` and
``/api/v1/me/subscriptions/`` (subscriptions to self-service message types)."""

from typing import cast

from django.contrib.auth.models import AbstractBaseUser
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.fields import StrictCharField, StrictInputSerializer
from core.openapi import ERRORS
from messagecenter import selectors, services
from messagecenter.models import CATEGORIES, EmailDigest
from messagecenter.services.notifications import MAX_SCOPE_LENGTH
from messagecenter.services.preferences import MAX_MUTED_TYPES

DIGESTS = tuple(d.value for d in EmailDigest)


def _user(request: Request) -> AbstractBaseUser:
    # IsAuthenticated (the default permission) ran first: never anonymous here.
    return cast(AbstractBaseUser, request.user)


class PreferencesSerializer(serializers.Serializer):
    muted_categories = serializers.ListField(
        child=serializers.CharField(), help_text=f"Inbox categories muted now (of {', '.join(CATEGORIES)})."
    )
    muted_message_types = serializers.ListField(
        child=serializers.CharField(), help_text="Codes of the message types muted now."
    )
    email_digest = serializers.ChoiceField(choices=DIGESTS, help_text="How often to get an e-mail digest.")


class PreferencesApi(APIView):
    """Items of a muted category or message type that arrive while it is muted
    never show in the inbox list, its counts or the live stream; unmuting
    does not bring them back."""

    class InputSerializer(StrictInputSerializer):
        # Names are checked by the service, which answers every unknown one at once.
        muted_categories = serializers.ListField(
            child=StrictCharField(max_length=64), max_length=MAX_MUTED_TYPES, required=False
        )
        muted_message_types = serializers.ListField(
            child=StrictCharField(max_length=64), max_length=MAX_MUTED_TYPES, required=False
        )
        email_digest = serializers.ChoiceField(choices=DIGESTS, required=False)

    @extend_schema(operation_id="me_preferences_get", responses={200: PreferencesSerializer, **ERRORS(401)})
    def get(self, request: Request) -> Response:
        prefs = selectors.preferences_get(user_id=int(_user(request).pk))
        return Response(PreferencesSerializer(prefs).data)

    @extend_schema(
        operation_id="me_preferences_put",
        description="Each list given replaces what is muted now; a field left out stays as it is. "
        "An unknown category or message type is a 400 naming them, and nothing changes. "
        "Duplicates count once.",
        request=InputSerializer,
        responses={200: PreferencesSerializer, **ERRORS(400, 401)},
    )
    def put(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        prefs = services.preferences_update(
            user=_user(request),
            muted_categories=data.get("muted_categories"),
            muted_message_types=data.get("muted_message_types"),
            email_digest=data.get("email_digest"),
        )
        return Response(PreferencesSerializer(prefs).data)


class MySubscriptionSerializer(serializers.Serializer):
    id = serializers.CharField()
    message_type = serializers.CharField(source="message_type.code")
    scope = serializers.CharField()


class MySubscriptionsApi(APIView):
    class OutputSerializer(serializers.Serializer):
        results = MySubscriptionSerializer(many=True)

    class InputSerializer(StrictInputSerializer):
        message_type = StrictCharField(max_length=64)
        scope = StrictCharField(max_length=MAX_SCOPE_LENGTH)

    @extend_schema(
        operation_id="me_subscriptions_list",
        description="The user's own subscriptions (not those they get through a group).",
        responses={200: OutputSerializer, **ERRORS(401)},
    )
    def get(self, request: Request) -> Response:
        rows = selectors.user_subscriptions(user_id=int(_user(request).pk))
        return Response(self.OutputSerializer({"results": rows}).data)

    @extend_schema(
        operation_id="me_subscriptions_create",
        description="Follow a message type created with `self_service: true` in a scope "
        "(403 for any other type, 409 when already following, 400 for an unknown type).",
        request=InputSerializer,
        responses={201: MySubscriptionSerializer, **ERRORS(400, 401, 403, 409)},
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        subscription = services.subscription_self_create(
            user=_user(request), message_type=data["message_type"], scope=data["scope"]
        )
        return Response(MySubscriptionSerializer(subscription).data, status=status.HTTP_201_CREATED)


class MySubscriptionApi(APIView):
    @extend_schema(
        operation_id="me_subscription_delete",
        description="Stop one of the user's own subscriptions; anyone else's id is a 404.",
        responses={204: None, **ERRORS(401, 404)},
    )
    def delete(self, request: Request, subscription_id: int) -> Response:
        services.subscription_self_delete(user=_user(request), subscription_id=int(subscription_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


__all__ = ["MySubscriptionApi", "MySubscriptionsApi", "PreferencesApi"]
