"""Operators: ``/api/v1/manage/`` user groups, bulletins and messages."""

from collections.abc import Callable
from typing import Any

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
    TimeField,
    user_id_field,
)
from core.openapi import ERRORS
from core.permissions import IsOperator
from messagecenter import services
from messagecenter.models import CATEGORIES, Bulletin, Message, MessageStatus, UserGroup

MAX_IDS = 10_000


class UserIdsSerializer(StrictInputSerializer):
    user_ids = serializers.ListField(child=user_id_field(), allow_empty=False, max_length=MAX_IDS)


class UserGroupCreateApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("messagecenter.add_usergroup",)

    class InputSerializer(StrictInputSerializer):
        name = StrictCharField(max_length=100)

    class OutputSerializer(serializers.Serializer):
        id = serializers.CharField()
        name = StrictCharField()
        member_count = serializers.IntegerField()

    @extend_schema(
        operation_id="manage_user_group_create",
        request=InputSerializer,
        responses={201: OutputSerializer, **ERRORS(400, 401, 403)},
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        group = services.user_group_create(name=serializer.validated_data["name"])
        data = {"id": group.pk, "name": group.name, "member_count": 0}
        return Response(self.OutputSerializer(data).data, status=status.HTTP_201_CREATED)


class UserGroupMembersApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("messagecenter.change_usergroup",)

    class InputSerializer(UserIdsSerializer):
        pass

    class AddedSerializer(serializers.Serializer):
        added = serializers.IntegerField()

    class RemovedSerializer(serializers.Serializer):
        removed = serializers.IntegerField()

    @extend_schema(
        operation_id="manage_user_group_members_add",
        request=InputSerializer,
        responses={200: AddedSerializer, **ERRORS(400, 401, 403, 404)},
    )
    def post(self, request: Request, group_id: int) -> Response:
        added = self._apply(request, group_id, services.user_group_add_members)
        return Response(self.AddedSerializer({"added": added}).data)

    @extend_schema(
        operation_id="manage_user_group_members_remove",
        request=InputSerializer,
        responses={200: RemovedSerializer, **ERRORS(400, 401, 403, 404)},
    )
    def delete(self, request: Request, group_id: int) -> Response:
        removed = self._apply(request, group_id, services.user_group_remove_members)
        return Response(self.RemovedSerializer({"removed": removed}).data)

    def _apply(self, request: Request, group_id: int, change: Callable[..., int]) -> int:
        """Validate ``{"user_ids"}`` and apply one membership service to the group."""
        group = get_object_or_404(UserGroup, pk=group_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return change(group=group, user_ids=serializer.validated_data["user_ids"])


class BulletinOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    title = serializers.CharField()
    body_html = serializers.CharField(allow_blank=True)
    display_time = OffsetDateTimeField()
    expire_at = OffsetDateTimeField(allow_null=True)
    user_groups = serializers.ListField(child=serializers.CharField())


def _bulletin_data(bulletin: Bulletin) -> dict[str, Any]:
    return {
        "id": bulletin.pk,
        "title": bulletin.title,
        "body_html": bulletin.body_html,
        "display_time": bulletin.display_time,
        "expire_at": bulletin.expire_at,
        "user_groups": [str(pk) for pk in bulletin.groups.values_list("pk", flat=True)],
    }


class BulletinCreateApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("messagecenter.add_bulletin",)

    class InputSerializer(StrictInputSerializer):
        title = StrictCharField(max_length=200)
        body_html = StrictCharField(allow_blank=True, max_length=100_000)
        display_time = TimeField()
        expire_at = TimeField(required=False, allow_null=True)
        user_groups = serializers.ListField(child=IdField(), required=False, max_length=1000)

    class OutputSerializer(BulletinOutputSerializer):
        pass

    @extend_schema(
        operation_id="manage_bulletin_create",
        request=InputSerializer,
        responses={201: OutputSerializer, **ERRORS(400, 401, 403)},
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        bulletin = services.bulletin_create(
            title=data["title"],
            body_html=data["body_html"],
            display_time=data["display_time"],
            expire_at=data.get("expire_at"),
            group_ids=data.get("user_groups") or [],
            actor=request.user,  # type: ignore[arg-type]
        )
        return Response(self.OutputSerializer(_bulletin_data(bulletin)).data, status=status.HTTP_201_CREATED)


class BulletinDetailApi(APIView):
    permission_classes = [IsOperator]

    @property
    def required_permissions(self) -> tuple[str, ...]:
        method = self.request.method if self.request else "PATCH"
        return ("messagecenter.delete_bulletin",) if method == "DELETE" else ("messagecenter.change_bulletin",)

    class InputSerializer(StrictInputSerializer):
        title = StrictCharField(max_length=200, required=False)
        body_html = StrictCharField(allow_blank=True, max_length=100_000, required=False)
        display_time = TimeField(required=False)
        expire_at = TimeField(required=False, allow_null=True)
        user_groups = serializers.ListField(child=IdField(), required=False, max_length=1000)

    class OutputSerializer(BulletinOutputSerializer):
        pass

    @extend_schema(
        operation_id="manage_bulletin_update",
        request=InputSerializer,
        responses={200: OutputSerializer, **ERRORS(400, 401, 403, 404)},
    )
    def patch(self, request: Request, bulletin_id: int) -> Response:
        bulletin = get_object_or_404(Bulletin, pk=bulletin_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        if "user_groups" in data:
            data["group_ids"] = data.pop("user_groups")
        bulletin, _changed = services.bulletin_update(bulletin=bulletin, data=data, actor=request.user)  # type: ignore[arg-type]
        return Response(self.OutputSerializer(_bulletin_data(bulletin)).data)

    @extend_schema(operation_id="manage_bulletin_delete", responses={204: None, **ERRORS(401, 403, 404)})
    def delete(self, request: Request, bulletin_id: int) -> Response:
        bulletin = get_object_or_404(Bulletin, pk=bulletin_id)
        services.bulletin_delete(bulletin=bulletin, actor=request.user)  # type: ignore[arg-type]
        return Response(status=status.HTTP_204_NO_CONTENT)


class MessageAudienceSerializer(StrictInputSerializer):
    users = serializers.ListField(child=user_id_field(), required=False, max_length=MAX_IDS)
    groups = serializers.ListField(child=IdField(), required=False, max_length=1000)
    everyone = StrictBooleanField(required=False, default=False)


class MessageSendApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("messagecenter.add_message",)

    class InputSerializer(StrictInputSerializer):
        category = serializers.ChoiceField(choices=CATEGORIES)
        title = StrictCharField(max_length=200)
        summary = StrictCharField(max_length=300, required=False, allow_blank=True)
        body_html = StrictCharField(allow_blank=True, max_length=100_000)
        link = serializers.URLField(max_length=500, required=False, allow_blank=True, allow_null=True)
        images = serializers.ListField(child=serializers.URLField(max_length=500), required=False, max_length=20)
        to = MessageAudienceSerializer()
        expire_at = TimeField(required=False, allow_null=True)
        # Send later: in the future, at most a year ahead (the answer's status is then "scheduled").
        send_at = TimeField(required=False)

    class OutputSerializer(serializers.Serializer):
        id = serializers.CharField()
        delivery = serializers.ChoiceField(choices=["push", "pull"])
        recipients = serializers.IntegerField(allow_null=True)
        status = serializers.ChoiceField(choices=MessageStatus.values)
        send_at = OffsetDateTimeField(allow_null=True)

    @extend_schema(
        operation_id="manage_message_send",
        description=(
            "With send_at (in the future, at most a year ahead) the message is stored with status "
            "scheduled and reaches nobody until then; PATCH or DELETE /manage/messages/{id}/ edit or cancel it."
        ),
        request=InputSerializer,
        responses={202: OutputSerializer, **ERRORS(400, 401, 403)},
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        to = data["to"]
        common = {
            "sender": request.user,
            "category": data["category"],
            "title": data["title"],
            "summary": data.get("summary") or "",
            "body_html": data["body_html"],
            "link": data.get("link") or "",
            "images": data.get("images") or [],
            "user_ids": to.get("users") or [],
            "group_ids": to.get("groups") or [],
            "everyone": to.get("everyone", False),
            "expire_at": data.get("expire_at"),
        }
        if data.get("send_at") is not None:
            message = services.message_schedule(**common, send_at=data["send_at"])
        else:
            message = services.message_send(**common)
        out = _message_state(message)
        return Response(self.OutputSerializer(out).data, status=status.HTTP_202_ACCEPTED)


def _message_state(message: Message) -> dict[str, Any]:
    return {
        "id": message.pk,
        "delivery": message.delivery,
        "recipients": message.audience_size,
        "status": message.status,
        "send_at": message.send_at,
    }


class ScheduledMessageSerializer(StrictInputSerializer):
    title = StrictCharField(max_length=200, required=False)
    summary = StrictCharField(max_length=300, required=False, allow_blank=True)
    body_html = StrictCharField(allow_blank=True, max_length=100_000, required=False)
    to = MessageAudienceSerializer(required=False)
    expire_at = TimeField(required=False, allow_null=True)
    send_at = TimeField(required=False)


class MessageRetractApi(APIView):
    permission_classes = [IsOperator]

    @property
    def required_permissions(self) -> tuple[str, ...]:
        method = self.request.method if self.request else "DELETE"
        return ("messagecenter.change_message",) if method == "PATCH" else ("messagecenter.delete_message",)

    @extend_schema(
        operation_id="manage_message_schedule_update",
        summary="Edit a scheduled message (409 once it was sent or cancelled)",
        request=ScheduledMessageSerializer,
        responses={200: MessageSendApi.OutputSerializer, **ERRORS(400, 401, 403, 404, 409)},
    )
    def patch(self, request: Request, message_id: int) -> Response:
        message = get_object_or_404(Message, pk=message_id)
        serializer = ScheduledMessageSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        message = services.message_schedule_update(message=message, data=serializer.validated_data)
        return Response(MessageSendApi.OutputSerializer(_message_state(message)).data)

    @extend_schema(
        operation_id="manage_message_retract",
        summary="Retract a sent message from every inbox, or cancel a scheduled one",
        responses={204: None, **ERRORS(401, 403, 404)},
    )
    def delete(self, request: Request, message_id: int) -> Response:
        message = get_object_or_404(Message, pk=message_id)
        services.message_retract(message=message, actor=request.user)  # type: ignore[arg-type]
        return Response(status=status.HTTP_204_NO_CONTENT)
