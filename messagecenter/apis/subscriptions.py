"""Operators: ``/api/v1/manage/`` message types, subscriptions and notifications.

A duplicate subscription (same type, scope and user or group) answers 409.
"""

from typing import Any

from django.core.validators import validate_slug
from django.db import transaction
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.trail import audit_api
from core.api.fields import (
    IdField,
    OffsetDateTimeField,
    StrictBooleanField,
    StrictCharField,
    StrictInputSerializer,
    StrictIntegerField,
    TimeField,
    TranslationsField,
    user_id_field,
)
from core.api.openapi import ERRORS, page_serializer
from core.api.pagination import list_response
from core.api.params import parse_choice, parse_id, parse_text, parse_time
from core.api.permissions import IsOperator
from messagecenter import manage_selectors, services
from messagecenter.apis import readback
from messagecenter.apis.readback import (
    ItemChannelsSerializer,
    MessageTypeOutputSerializer,
    NotificationOutputSerializer,
    SubscriptionOutputSerializer,
)
from messagecenter.channel_selectors import channel_counts
from messagecenter.models import CATEGORIES, Notification, NotificationStatus, Subscription
from messagecenter.services.notifications import MAX_TTL_SECONDS


class MessageTypeCreateApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("messagecenter.add_messagetype",)
    read_permissions = ("messagecenter.view_messagetype",)

    class InputSerializer(StrictInputSerializer):
        # A slug, and text: SlugField alone would take the number 123 as "123".
        code = StrictCharField(max_length=64, validators=[validate_slug])
        name = StrictCharField(max_length=100)
        category = serializers.ChoiceField(choices=CATEGORIES, required=False, default="system")
        default_ttl_seconds = StrictIntegerField(min_value=1, max_value=MAX_TTL_SECONDS, required=False)
        self_service = StrictBooleanField(required=False, default=False)

    class OutputSerializer(MessageTypeOutputSerializer):
        # The read-back's fields: one place to add a field to both answers.
        pass

    @extend_schema(
        operation_id="manage_message_type_create",
        request=InputSerializer,
        responses={201: OutputSerializer, **ERRORS(400, 401, 403)},
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        with transaction.atomic():
            message_type = services.message_type_create(
                code=data["code"],
                name=data["name"],
                category=data["category"],
                default_ttl_seconds=data.get("default_ttl_seconds"),
                self_service=data["self_service"],
            )
            audit_api(request, action="create", obj=message_type, changes=data)
        return Response(self.OutputSerializer(message_type).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="manage_message_type_list",
        summary="Message types, newest first",
        parameters=readback.MESSAGE_TYPE_FILTERS,
        responses={200: page_serializer("MessageTypePage", MessageTypeOutputSerializer), **ERRORS(400, 401, 403)},
        examples=[readback.page_example(readback.MESSAGE_TYPE_EXAMPLE)],
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        return list_response(
            request,
            manage_selectors.message_type_manage_list,
            lambda rows: MessageTypeOutputSerializer(rows, many=True).data,
            category=parse_choice(params.get("category"), name="category", choices=CATEGORIES),
            since=parse_time(params.get("since"), name="since"),
        )


class MessageTypeDetailApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("messagecenter.view_messagetype",)

    @extend_schema(
        operation_id="manage_message_type_retrieve",
        summary="One message type",
        responses={200: MessageTypeOutputSerializer, **ERRORS(400, 401, 403, 404)},
        examples=[readback.one_example(readback.MESSAGE_TYPE_EXAMPLE)],
    )
    def get(self, request: Request, message_type_id: int) -> Response:
        message_type = manage_selectors.message_type_manage_get(message_type_id=message_type_id)
        return Response(MessageTypeOutputSerializer(message_type).data)


class SubscriptionCreateApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("messagecenter.add_subscription",)
    read_permissions = ("messagecenter.view_subscription",)

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
        with transaction.atomic():
            subscription = services.subscription_create(
                message_type=data["message_type"],
                scope=data["scope"],
                user_id=data.get("user"),
                group_id=data.get("group"),
            )
            audit_api(request, action="create", obj=subscription, changes=data)
        return Response(self.OutputSerializer(subscription).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="manage_subscription_list",
        summary="Subscriptions, newest first",
        parameters=readback.SUBSCRIPTION_FILTERS,
        responses={200: page_serializer("SubscriptionPage", SubscriptionOutputSerializer), **ERRORS(400, 401, 403)},
        examples=[readback.page_example(readback.SUBSCRIPTION_EXAMPLE)],
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        return list_response(
            request,
            manage_selectors.subscription_manage_list,
            lambda rows: SubscriptionOutputSerializer(rows, many=True).data,
            message_type=parse_text(params.get("message_type"), name="message_type", max_length=64),
            scope=parse_text(params.get("scope"), name="scope", max_length=100),
            user=parse_id(params.get("user"), name="user"),
            group=parse_id(params.get("group"), name="group"),
            since=parse_time(params.get("since"), name="since"),
        )


class SubscriptionDeleteApi(APIView):
    """DELETE removes; GET reads the subscription back."""

    permission_classes = [IsOperator]
    required_permissions = ("messagecenter.delete_subscription",)
    read_permissions = ("messagecenter.view_subscription",)

    @extend_schema(operation_id="manage_subscription_delete", responses={204: None, **ERRORS(401, 403, 404)})
    def delete(self, request: Request, subscription_id: int) -> Response:
        subscription = get_object_or_404(Subscription, pk=subscription_id)
        with transaction.atomic():
            audit_api(request, action="delete", obj=subscription)
            services.subscription_delete(subscription=subscription)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        operation_id="manage_subscription_retrieve",
        summary="One subscription",
        responses={200: SubscriptionOutputSerializer, **ERRORS(400, 401, 403, 404)},
        examples=[readback.one_example(readback.SUBSCRIPTION_EXAMPLE)],
    )
    def get(self, request: Request, subscription_id: int) -> Response:
        subscription = manage_selectors.subscription_manage_get(subscription_id=subscription_id)
        return Response(SubscriptionOutputSerializer(subscription).data)


class NotificationStateSerializer(serializers.Serializer):
    id = serializers.CharField()
    recipients = serializers.IntegerField(help_text="0 while scheduled: the audience is resolved at send time.")
    expire_at = OffsetDateTimeField()
    status = serializers.ChoiceField(choices=NotificationStatus.choices)
    send_at = OffsetDateTimeField(allow_null=True)


def _notification_state(notification: Notification) -> dict[str, Any]:
    return {
        "id": notification.pk,
        "recipients": notification.recipients,
        "expire_at": notification.expire_at,
        "status": notification.status,
        "send_at": notification.send_at,
    }


class NotificationSendApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("messagecenter.add_notification",)
    read_permissions = ("messagecenter.view_notification",)

    class InputSerializer(StrictInputSerializer):
        message_type = StrictCharField(max_length=64)
        scope = StrictCharField(max_length=100)
        title = StrictCharField(max_length=200)
        body_html = StrictCharField(allow_blank=True, max_length=100_000)
        ttl_seconds = StrictIntegerField(min_value=1, max_value=MAX_TTL_SECONDS, required=False, allow_null=True)
        # Send later: in the future, at most a year ahead (the answer's status is then "scheduled").
        send_at = TimeField(required=False)
        channels = ItemChannelsSerializer(required=False, allow_null=True)
        translations = TranslationsField(required=False)
        group_key = StrictCharField(
            max_length=100,
            required=False,
            allow_blank=True,
            help_text="Group key: while a recipient has an unread item of this key, the new one takes its row.",
        )
        actor = StrictCharField(
            max_length=100, required=False, allow_blank=True, help_text="Display name a grouped row lists."
        )

    class OutputSerializer(NotificationStateSerializer):
        pass

    @extend_schema(
        operation_id="manage_notification_send",
        description=(
            "With send_at (in the future, at most a year ahead) the notification is stored with status "
            "scheduled and sent to the subscribers of that time; PATCH or DELETE its detail to edit or cancel it."
        ),
        request=InputSerializer,
        responses={202: OutputSerializer, **ERRORS(400, 401, 403)},
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        common = {
            "message_type": data["message_type"],
            "scope": data["scope"],
            "title": data["title"],
            "body_html": data["body_html"],
            "ttl_seconds": data.get("ttl_seconds"),
            "channels": services.channel_request(data.get("channels")),
            "translations": data.get("translations"),
        }
        with transaction.atomic():
            if data.get("send_at") is not None:
                notification = services.notification_schedule(
                    **common,
                    send_at=data["send_at"],
                    group_key=data.get("group_key") or "",
                    actor=data.get("actor") or "",
                )
            else:
                notification = services.notification_send(
                    **common, group_key=data.get("group_key") or "", actor=data.get("actor") or ""
                )
            audit_api(request, action="create", obj=notification, changes=data)
        return Response(self.OutputSerializer(_notification_state(notification)).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        operation_id="manage_notification_list",
        summary="Notifications sent, newest first",
        parameters=readback.NOTIFICATION_FILTERS,
        responses={200: page_serializer("NotificationPage", NotificationOutputSerializer), **ERRORS(400, 401, 403)},
        examples=[readback.page_example(readback.NOTIFICATION_EXAMPLE)],
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        return list_response(
            request,
            manage_selectors.notification_manage_list,
            lambda rows: (
                NotificationOutputSerializer(
                    rows, many=True, context={"channels": channel_counts(item_ids=[row.ref for row in rows])}
                ).data
            ),
            message_type=parse_text(params.get("message_type"), name="message_type", max_length=64),
            scope=parse_text(params.get("scope"), name="scope", max_length=100),
            category=parse_choice(params.get("category"), name="category", choices=CATEGORIES),
            since=parse_time(params.get("since"), name="since"),
        )


class NotificationDetailApi(APIView):
    """Read a notification back, edit a scheduled one before it is sent (409 after), cancel it, or
    withdraw a sent one."""

    permission_classes = [IsOperator]
    read_permissions = ("messagecenter.view_notification",)

    @property
    def required_permissions(self) -> tuple[str, ...]:
        method = self.request.method if self.request else "PATCH"
        return ("messagecenter.delete_notification",) if method == "DELETE" else ("messagecenter.change_notification",)

    class InputSerializer(StrictInputSerializer):
        title = StrictCharField(max_length=200, required=False)
        body_html = StrictCharField(allow_blank=True, max_length=100_000, required=False)
        scope = StrictCharField(max_length=100, required=False)
        ttl_seconds = StrictIntegerField(min_value=1, max_value=MAX_TTL_SECONDS, required=False)
        send_at = TimeField(required=False)

    @extend_schema(
        operation_id="manage_notification_update",
        summary="Edit a scheduled notification (409 once it was sent)",
        request=InputSerializer,
        responses={200: NotificationStateSerializer, **ERRORS(400, 401, 403, 404, 409)},
    )
    def patch(self, request: Request, notification_id: int) -> Response:
        notification = get_object_or_404(Notification, pk=notification_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        with transaction.atomic():
            notification = services.notification_schedule_update(
                notification=notification, data=serializer.validated_data
            )
            audit_api(request, action="update", obj=notification, changes=serializer.validated_data)
        return Response(NotificationStateSerializer(_notification_state(notification)).data)

    @extend_schema(
        operation_id="manage_notification_delete",
        summary="Cancel a scheduled notification, or withdraw a sent one from every inbox",
        responses={204: None, **ERRORS(401, 403, 404)},
    )
    def delete(self, request: Request, notification_id: int) -> Response:
        notification = get_object_or_404(Notification, pk=notification_id)
        with transaction.atomic():
            services.notification_cancel_or_withdraw(notification=notification)
            audit_api(request, action="delete", obj=notification)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        operation_id="manage_notification_retrieve",
        summary="One notification",
        responses={200: NotificationOutputSerializer, **ERRORS(400, 401, 403, 404)},
        examples=[readback.one_example(readback.NOTIFICATION_EXAMPLE)],
    )
    def get(self, request: Request, notification_id: int) -> Response:
        notification = manage_selectors.notification_manage_get(notification_id=notification_id)
        return Response(NotificationOutputSerializer(notification).data)
