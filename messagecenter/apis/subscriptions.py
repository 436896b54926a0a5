"""Operators: ``/api/v1/manage/`` message types, subscriptions and notifications.

A duplicate subscription (same type, scope and user or group) answers 409.
"""

from django.core.validators import validate_slug
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.fields import (
    IdField,
    OffsetDateTimeField,
    StrictBooleanField,
    StrictCharField,
    StrictInputSerializer,
    StrictIntegerField,
    user_id_field,
)
from core.openapi import ERRORS
from core.permissions import IsOperator
from messagecenter import services
from messagecenter.models import CATEGORIES, Subscription
from messagecenter.services.notifications import MAX_TTL_SECONDS


class MessageTypeCreateApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("messagecenter.add_messagetype",)

    class InputSerializer(StrictInputSerializer):
        # A slug, and text: SlugField alone would take the number 123 as "123".
        code = StrictCharField(max_length=64, validators=[validate_slug])
        name = StrictCharField(max_length=100)
        category = serializers.ChoiceField(choices=CATEGORIES, required=False, default="system")
        default_ttl_seconds = StrictIntegerField(min_value=1, max_value=MAX_TTL_SECONDS, required=False)
        self_service = StrictBooleanField(required=False, default=False)

    class OutputSerializer(serializers.Serializer):
        id = serializers.CharField()
        code = serializers.CharField()
        name = serializers.CharField()
        category = serializers.CharField()
        default_ttl_seconds = serializers.IntegerField()
        self_service = serializers.BooleanField()

    @extend_schema(
        operation_id="manage_message_type_create",
        request=InputSerializer,
        responses={201: OutputSerializer, **ERRORS(400, 401, 403)},
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        message_type = services.message_type_create(
            code=data["code"],
            name=data["name"],
            category=data["category"],
            default_ttl_seconds=data.get("default_ttl_seconds"),
            self_service=data["self_service"],
        )
        return Response(self.OutputSerializer(message_type).data, status=status.HTTP_201_CREATED)


class SubscriptionCreateApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("messagecenter.add_subscription",)

    class InputSerializer(StrictInputSerializer):
        message_type = StrictCharField(max_length=64)
        scope = StrictCharField(max_length=100)
        user = user_id_field(required=False, allow_null=True)
        group = IdField(required=False, allow_null=True)

    class OutputSerializer(serializers.Serializer):
        id = serializers.CharField()
        message_type = serializers.CharField(source="message_type.code")
        scope = serializers.CharField()
        user = serializers.CharField(source="user_id", allow_null=True)
        group = serializers.CharField(source="group_id", allow_null=True)
        created_at = OffsetDateTimeField()

    @extend_schema(
        operation_id="manage_subscription_create",
        request=InputSerializer,
        responses={201: OutputSerializer, **ERRORS(400, 401, 403, 409)},
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        subscription = services.subscription_create(
            message_type=data["message_type"],
            scope=data["scope"],
            user_id=data.get("user"),
            group_id=data.get("group"),
        )
        return Response(self.OutputSerializer(subscription).data, status=status.HTTP_201_CREATED)


class SubscriptionDeleteApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("messagecenter.delete_subscription",)

    @extend_schema(operation_id="manage_subscription_delete", responses={204: None, **ERRORS(401, 403, 404)})
    def delete(self, request: Request, subscription_id: int) -> Response:
        subscription = get_object_or_404(Subscription, pk=subscription_id)
        services.subscription_delete(subscription=subscription)
        return Response(status=status.HTTP_204_NO_CONTENT)


class NotificationSendApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("messagecenter.add_notification",)

    class InputSerializer(StrictInputSerializer):
        message_type = StrictCharField(max_length=64)
        scope = StrictCharField(max_length=100)
        title = StrictCharField(max_length=200)
        body_html = StrictCharField(allow_blank=True, max_length=100_000)
        ttl_seconds = StrictIntegerField(min_value=1, max_value=MAX_TTL_SECONDS, required=False, allow_null=True)

    class OutputSerializer(serializers.Serializer):
        id = serializers.CharField()
        recipients = serializers.IntegerField()
        expire_at = OffsetDateTimeField()

    @extend_schema(
        operation_id="manage_notification_send",
        request=InputSerializer,
        responses={202: OutputSerializer, **ERRORS(400, 401, 403)},
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        notification = services.notification_send(
            message_type=data["message_type"],
            scope=data["scope"],
            title=data["title"],
            body_html=data["body_html"],
            ttl_seconds=data.get("ttl_seconds"),
        )
        return Response(self.OutputSerializer(notification).data, status=status.HTTP_202_ACCEPTED)
