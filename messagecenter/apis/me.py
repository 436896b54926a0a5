"""The signed-in user's own settings: ``/api/v1/me/preferences/`` and
``/api/v1/me/subscriptions/`` (subscriptions to self-service message types)."""

from typing import cast

from django.contrib.auth.models import AbstractBaseUser
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.fields import StrictBooleanField, StrictCharField, StrictInputSerializer
from core.api.openapi import ERRORS
from messagecenter import channel_prefs, selectors, services
from messagecenter.models import CATEGORIES, EmailDigest
from messagecenter.services.notifications import MAX_SCOPE_LENGTH
from messagecenter.services.preferences import MAX_MUTED_TYPES, UNCHANGED

DIGESTS = tuple(d.value for d in EmailDigest)


def _user(request: Request) -> AbstractBaseUser:
    # IsAuthenticated (the default permission) ran first: never anonymous here.
    return cast(AbstractBaseUser, request.user)


class ChannelChoiceSerializer(serializers.Serializer):
    email = serializers.ChoiceField(
        choices=channel_prefs.EMAIL_CHOICES,
        help_text="An e-mail about an item still unread after the operator's delay (if_unread), the item "
        "in the next digest instead (digest), or nothing (off).",
    )
    web_push = serializers.BooleanField(help_text="A push to the user's devices.")


class ChannelChoiceInputSerializer(StrictInputSerializer):
    email = serializers.ChoiceField(choices=channel_prefs.EMAIL_CHOICES, required=False)
    web_push = StrictBooleanField(required=False)


ChannelsSerializer = inline_serializer(
    "ChannelsPreferences",
    {category: ChannelChoiceSerializer() for category in CATEGORIES},
    help_text="Per inbox category, the choice for each channel (defaults: if_unread and true).",
)


class ChannelsInputSerializer(StrictInputSerializer):
    """The categories given replace those choices; the others stay."""

    system = ChannelChoiceInputSerializer(required=False)
    promotion = ChannelChoiceInputSerializer(required=False)
    transaction = ChannelChoiceInputSerializer(required=False)
    interaction = ChannelChoiceInputSerializer(required=False)


class QuietHoursSerializer(serializers.Serializer):
    start = serializers.CharField(help_text="HH:MM, 24-hour, on the user's clock.")
    end = serializers.CharField(help_text="HH:MM; before start means the hours span midnight.")
    timezone = serializers.CharField(help_text="An IANA time zone name, e.g. Europe/Berlin.")


class QuietHoursInputSerializer(StrictInputSerializer):
    start = StrictCharField(max_length=5, help_text="HH:MM, 24-hour.")
    end = StrictCharField(max_length=5, help_text="HH:MM; before start means the hours span midnight.")
    timezone = StrictCharField(max_length=64, help_text="An IANA time zone name, e.g. Europe/Berlin.")


LANGUAGES_HELP = "A language code of the project (settings.LANGUAGES, e.g. en, zh-hans), or null: none chosen."


class PreferencesSerializer(serializers.Serializer):
    muted_categories = serializers.ListField(
        child=serializers.CharField(), help_text=f"Inbox categories muted now (of {', '.join(CATEGORIES)})."
    )
    muted_message_types = serializers.ListField(
        child=serializers.CharField(), help_text="Codes of the message types muted now."
    )
    email_digest = serializers.ChoiceField(choices=DIGESTS, help_text="How often to get an e-mail digest.")
    channels = ChannelsSerializer
    quiet_hours = QuietHoursSerializer(
        allow_null=True,
        help_text="No push and no e-mail (other than digests) inside them; what was held goes out when they "
        "end, as one push and one e-mail at most. null: none.",
    )
    language = serializers.CharField(allow_null=True, help_text=LANGUAGES_HELP)


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
        channels = ChannelsInputSerializer(required=False)
        quiet_hours = QuietHoursInputSerializer(required=False, allow_null=True)
        language = StrictCharField(required=False, allow_null=True, max_length=16, help_text=LANGUAGES_HELP)

    @extend_schema(operation_id="me_preferences_get", responses={200: PreferencesSerializer, **ERRORS(401)})
    def get(self, request: Request) -> Response:
        prefs = selectors.preferences_get(user_id=int(_user(request).pk))
        return Response(PreferencesSerializer(prefs).data)

    @extend_schema(
        operation_id="me_preferences_put",
        description="Each list given replaces what is muted now; a field left out stays as it is. "
        "An unknown category or message type is a 400 naming them, and nothing changes. "
        "Duplicates count once. `channels` changes the categories it names (each field given); "
        "`quiet_hours` and `language` take null to clear them. A bad time, zone, language or channel "
        "choice is a 400, and nothing changes.",
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
            channels=data.get("channels"),
            quiet_hours=data["quiet_hours"] if "quiet_hours" in data else UNCHANGED,
            language=data["language"] if "language" in data else UNCHANGED,
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
