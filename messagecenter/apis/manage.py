"""Operators: ``/api/v1/manage/`` user groups, bulletins and messages."""

from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.trail import audit_api
from core.api.errors import ValidationFailed
from core.api.fields import (
    IdField,
    OffsetDateTimeField,
    StrictBooleanField,
    StrictCharField,
    StrictInputSerializer,
    TimeField,
    TranslationsField,
    user_id_field,
)
from core.api.openapi import ERRORS, list_parameters, page_serializer
from core.api.pagination import list_response
from core.api.params import parse_choice, parse_id, parse_limit, parse_text, parse_time
from core.api.permissions import IsOperator
from messagecenter import manage_selectors, services
from messagecenter.apis import readback
from messagecenter.apis.readback import (
    BulletinReadSerializer,
    MemberSerializer,
    MessageReadSerializer,
    UserGroupOutputSerializer,
)
from messagecenter.models import CATEGORIES, Bulletin, DeliveryMode, Message, MessageStatus, UserGroup

MAX_IDS = 10_000


class UserIdsSerializer(StrictInputSerializer):
    user_ids = serializers.ListField(child=user_id_field(), allow_empty=False, max_length=MAX_IDS)


class UserGroupCreateApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("messagecenter.add_usergroup",)
    read_permissions = ("messagecenter.view_usergroup",)

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
        with transaction.atomic():
            group = services.user_group_create(name=serializer.validated_data["name"])
            audit_api(request, action="create", obj=group, changes=serializer.validated_data)
        data = {"id": group.pk, "name": group.name, "member_count": 0}
        return Response(self.OutputSerializer(data).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="manage_user_group_list",
        summary="User groups, newest first",
        parameters=readback.USER_GROUP_FILTERS,
        responses={200: page_serializer("UserGroupPage", UserGroupOutputSerializer), **ERRORS(400, 401, 403)},
        examples=[readback.page_example(readback.USER_GROUP_EXAMPLE)],
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        return list_response(
            request,
            manage_selectors.user_group_manage_list,
            lambda rows: UserGroupOutputSerializer(rows, many=True).data,
            name=parse_text(params.get("name"), name="name", max_length=100),
            since=parse_time(params.get("since"), name="since"),
        )


class UserGroupDetailApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("messagecenter.view_usergroup",)

    @extend_schema(
        operation_id="manage_user_group_retrieve",
        summary="One user group",
        responses={200: UserGroupOutputSerializer, **ERRORS(400, 401, 403, 404)},
        examples=[readback.one_example(readback.USER_GROUP_EXAMPLE)],
    )
    def get(self, request: Request, group_id: int) -> Response:
        group = manage_selectors.user_group_manage_get(group_id=group_id)
        return Response(UserGroupOutputSerializer(group).data)


class UserGroupMembersApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("messagecenter.change_usergroup",)
    read_permissions = ("messagecenter.view_usergroup",)

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
        added = self._apply(request, group_id, services.user_group_add_members, "members_add")
        return Response(self.AddedSerializer({"added": added}).data)

    @extend_schema(
        operation_id="manage_user_group_members_remove",
        request=InputSerializer,
        responses={200: RemovedSerializer, **ERRORS(400, 401, 403, 404)},
    )
    def delete(self, request: Request, group_id: int) -> Response:
        removed = self._apply(request, group_id, services.user_group_remove_members, "members_remove")
        return Response(self.RemovedSerializer({"removed": removed}).data)

    def _apply(self, request: Request, group_id: int, change: Callable[..., int], action: str) -> int:
        """Validate ``{"user_ids"}`` and apply one membership service to the group."""
        group = get_object_or_404(UserGroup, pk=group_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        user_ids = serializer.validated_data["user_ids"]
        with transaction.atomic():
            count = change(group=group, user_ids=user_ids)
            audit_api(request, action=action, obj=group, changes={"user_ids": user_ids, "count": count})
        return count

    @extend_schema(
        operation_id="manage_user_group_members_list",
        summary="Members of a user group, newest first (by when they joined)",
        parameters=list_parameters()[:2],
        responses={200: page_serializer("UserGroupMemberPage", MemberSerializer), **ERRORS(400, 401, 403, 404)},
        examples=[readback.page_example(readback.MEMBER_EXAMPLE)],
    )
    def get(self, request: Request, group_id: int) -> Response:
        group = manage_selectors.user_group_manage_get(group_id=group_id)
        page = manage_selectors.user_group_members_list(
            group=group, limit=parse_limit(request.query_params.get("limit")), cursor=request.query_params.get("cursor")
        )
        return Response({"results": readback.members_data(page.items), "next_cursor": page.next_cursor})


class BulletinOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    title = serializers.CharField()
    body_html = serializers.CharField(allow_blank=True)
    display_time = OffsetDateTimeField()
    expire_at = OffsetDateTimeField(allow_null=True)
    user_groups = serializers.ListField(child=serializers.CharField())
    translations = TranslationsField()


def _bulletin_data(bulletin: Bulletin) -> dict[str, Any]:
    return {
        "id": bulletin.pk,
        "title": bulletin.title,
        "body_html": bulletin.body_html,
        "display_time": bulletin.display_time,
        "expire_at": bulletin.expire_at,
        "user_groups": [str(pk) for pk in bulletin.groups.values_list("pk", flat=True)],
        "translations": dict(bulletin.translations or {}),
    }


class BulletinCreateApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("messagecenter.add_bulletin",)
    read_permissions = ("messagecenter.view_bulletin",)

    class InputSerializer(StrictInputSerializer):
        title = StrictCharField(max_length=200)
        body_html = StrictCharField(allow_blank=True, max_length=100_000)
        display_time = TimeField()
        expire_at = TimeField(required=False, allow_null=True)
        user_groups = serializers.ListField(child=IdField(), required=False, max_length=1000)
        translations = TranslationsField(required=False)

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
        with transaction.atomic():
            bulletin = services.bulletin_create(
                title=data["title"],
                body_html=data["body_html"],
                display_time=data["display_time"],
                expire_at=data.get("expire_at"),
                group_ids=data.get("user_groups") or [],
                actor=request.user,  # type: ignore[arg-type]
                translations=data.get("translations"),
            )
            audit_api(request, action="create", obj=bulletin, changes=data)
        return Response(self.OutputSerializer(_bulletin_data(bulletin)).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="manage_bulletin_list",
        summary="Bulletins, newest first",
        parameters=readback.BULLETIN_FILTERS,
        responses={200: page_serializer("BulletinPage", BulletinReadSerializer), **ERRORS(400, 401, 403)},
        examples=[readback.page_example(readback.BULLETIN_EXAMPLE)],
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        return list_response(
            request,
            manage_selectors.bulletin_manage_list,
            lambda rows: [readback.bulletin_data(b) for b in rows],
            group=parse_id(params.get("group"), name="group"),
            status=parse_choice(params.get("status"), name="status", choices=manage_selectors.BULLETIN_STATUSES),
            since=parse_time(params.get("since"), name="since"),
            now=timezone.now(),
        )


class BulletinDetailApi(APIView):
    permission_classes = [IsOperator]
    read_permissions = ("messagecenter.view_bulletin",)

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
        translations = TranslationsField(required=False, help_text="Replaces every translation ({} drops them).")

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
        with transaction.atomic():
            bulletin, _changed = services.bulletin_update(bulletin=bulletin, data=data, actor=request.user)  # type: ignore[arg-type]
            audit_api(request, action="update", obj=bulletin, changes=serializer.validated_data)
        return Response(self.OutputSerializer(_bulletin_data(bulletin)).data)

    @extend_schema(operation_id="manage_bulletin_delete", responses={204: None, **ERRORS(401, 403, 404)})
    def delete(self, request: Request, bulletin_id: int) -> Response:
        bulletin = get_object_or_404(Bulletin, pk=bulletin_id)
        with transaction.atomic():
            audit_api(request, action="delete", obj=bulletin)
            services.bulletin_delete(bulletin=bulletin, actor=request.user)  # type: ignore[arg-type]
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        operation_id="manage_bulletin_retrieve",
        summary="One bulletin",
        responses={200: BulletinReadSerializer, **ERRORS(400, 401, 403, 404)},
        examples=[readback.one_example(readback.BULLETIN_EXAMPLE)],
    )
    def get(self, request: Request, bulletin_id: int) -> Response:
        bulletin = manage_selectors.bulletin_manage_get(bulletin_id=bulletin_id)
        return Response(readback.bulletin_data(bulletin))


class MessageAudienceSerializer(StrictInputSerializer):
    users = serializers.ListField(child=user_id_field(), required=False, max_length=MAX_IDS)
    groups = serializers.ListField(child=IdField(), required=False, max_length=1000)
    everyone = StrictBooleanField(required=False, default=False)


IDEMPOTENCY_HEADER = "Idempotency-Key"
_SEND_ANSWER = {"id": "311", "delivery": "push", "recipients": 13}


class MessageSendApi(APIView):
    """POST sends (idempotently with a key); GET lists what was sent."""

    permission_classes = [IsOperator]
    required_permissions = ("messagecenter.add_message",)
    read_permissions = ("messagecenter.view_message",)

    class InputSerializer(StrictInputSerializer):
        category = serializers.ChoiceField(choices=CATEGORIES)
        title = StrictCharField(max_length=200)
        summary = StrictCharField(max_length=300, required=False, allow_blank=True)
        body_html = StrictCharField(allow_blank=True, max_length=100_000)
        link = serializers.URLField(max_length=500, required=False, allow_blank=True, allow_null=True)
        images = serializers.ListField(child=serializers.URLField(max_length=500), required=False, max_length=20)
        to = MessageAudienceSerializer()
        expire_at = TimeField(required=False, allow_null=True)
        idempotency_key = StrictCharField(
            max_length=200,
            required=False,
            help_text="A retry with the same key within 24 hours stores nothing and answers 200 with the "
            "first message (the Idempotency-Key header means the same). Keys are global, not per operator.",
        )
        # Send later: in the future, at most a year ahead (the answer's status is then "scheduled").
        send_at = TimeField(required=False)
        channels = readback.ItemChannelsSerializer(required=False, allow_null=True)
        actions = serializers.ListField(
            child=readback.ActionInputSerializer(),
            required=False,
            min_length=1,
            max_length=3,
            help_text="One to three actions recipients may answer (distinct ids).",
        )
        translations = TranslationsField(required=False)
        group_key = StrictCharField(
            max_length=100,
            required=False,
            allow_blank=True,
            help_text="Group key (e.g. order:42): while a recipient has an unread item of this key, the new "
            "one takes its row instead of adding one.",
        )
        actor = StrictCharField(
            max_length=100, required=False, allow_blank=True, help_text="Display name a grouped row lists."
        )

    class OutputSerializer(serializers.Serializer):
        id = serializers.CharField()
        delivery = serializers.ChoiceField(choices=["push", "pull"])
        recipients = serializers.IntegerField(allow_null=True)
        status = serializers.ChoiceField(choices=MessageStatus.choices)
        send_at = OffsetDateTimeField(allow_null=True)

    @extend_schema(
        operation_id="manage_message_send",
        summary="Send a message (idempotent with a key; optionally scheduled)",
        description="202 when stored and queued for delivery. With an idempotency key (body field or "
        "`Idempotency-Key` header) a repeat within 24 hours stores nothing and answers 200 with the first "
        "message; the same key with another body is 409. With send_at (in the future, at most a year ahead) "
        "the message is stored with status scheduled and reaches nobody until then; PATCH or DELETE "
        "/manage/messages/{id}/ edit or cancel it.",
        request=InputSerializer,
        parameters=[
            OpenApiParameter(
                IDEMPOTENCY_HEADER,
                OpenApiTypes.STR,
                location=OpenApiParameter.HEADER,
                description="Same meaning as the body's `idempotency_key` (at most 200 characters); "
                "when both are given they must be equal.",
            )
        ],
        responses={202: OutputSerializer, 200: OutputSerializer, **ERRORS(400, 401, 403, 409)},
        examples=[
            OpenApiExample("Sent", value=_SEND_ANSWER, response_only=True, status_codes=["202"]),
            OpenApiExample("A repeat of a sent key", value=_SEND_ANSWER, response_only=True, status_codes=["200"]),
        ],
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        key = self.key_of(request, data.pop("idempotency_key", None))
        to = data["to"]

        def send() -> Message:
            common: dict[str, Any] = {
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
                "group_key": data.get("group_key") or "",
                "actor": data.get("actor") or "",
            }
            message = services.message_send(
                **common,
                send_at=data.get("send_at"),
                channels=services.channel_request(data.get("channels")),
                actions=data.get("actions"),
                translations=data.get("translations"),
            )
            audit_api(request, action="create", obj=message, changes={**data, "idempotency_key": key})
            return message

        with transaction.atomic():
            if key is None:
                message, created = send(), True
            else:
                fingerprint = services.request_fingerprint(data)
                message, created = services.message_send_once(key=key, fingerprint=fingerprint, send=send)
        out = message_state(message)
        code = status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK
        return Response(self.OutputSerializer(out).data, status=code)

    @staticmethod
    def key_of(request: Request, body_key: str | None) -> str | None:
        header = request.headers.get(IDEMPOTENCY_HEADER)
        if header is not None and (header == "" or len(header) > 200):
            raise ValidationFailed(
                f"The {IDEMPOTENCY_HEADER} header must be 1 to 200 characters.",
                fields={"idempotency_key": ["1 to 200 characters."]},
            )
        if header is not None and body_key is not None and header != body_key:
            raise ValidationFailed(
                f"The {IDEMPOTENCY_HEADER} header and idempotency_key differ.",
                fields={"idempotency_key": ["Differs from the header."]},
            )
        key = body_key if body_key is not None else header
        if key is not None and key == "":
            raise ValidationFailed("idempotency_key must not be empty.", fields={"idempotency_key": ["Empty."]})
        return key

    @extend_schema(
        operation_id="manage_message_list",
        summary="Messages sent, newest first, with read counts",
        parameters=readback.MESSAGE_FILTERS,
        responses={200: page_serializer("MessagePage", MessageReadSerializer), **ERRORS(400, 401, 403, 503)},
        examples=[readback.page_example(readback.MESSAGE_EXAMPLE)],
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        return list_response(
            request,
            manage_selectors.message_manage_list,
            lambda items: [readback.message_data(item) for item in items],
            category=parse_choice(params.get("category"), name="category", choices=CATEGORIES),
            status=parse_choice(params.get("status"), name="status", choices=MessageStatus.values),
            delivery=parse_choice(params.get("delivery"), name="delivery", choices=DeliveryMode.values),
            group=parse_id(params.get("group"), name="group"),
            since=parse_time(params.get("since"), name="since"),
        )


def message_state(message: Message) -> dict[str, Any]:
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
    actions = serializers.ListField(
        child=readback.ActionInputSerializer(),
        required=False,
        max_length=3,
        help_text="Replaces the actions ([] drops them).",
    )
    translations = TranslationsField(required=False, help_text="Replaces every translation ({} drops them).")


class MessageRetractApi(APIView):
    """DELETE retracts; GET reads the message back."""

    permission_classes = [IsOperator]
    read_permissions = ("messagecenter.view_message",)

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
        with transaction.atomic():
            message = services.message_schedule_update(message=message, data=serializer.validated_data)
            audit_api(request, action="update", obj=message, changes=serializer.validated_data)
        return Response(MessageSendApi.OutputSerializer(message_state(message)).data)

    @extend_schema(
        operation_id="manage_message_retract",
        summary="Retract a sent message from every inbox, or cancel a scheduled one",
        responses={204: None, **ERRORS(401, 403, 404)},
    )
    def delete(self, request: Request, message_id: int) -> Response:
        message = get_object_or_404(Message, pk=message_id)
        with transaction.atomic():
            services.message_retract(message=message, actor=request.user)  # type: ignore[arg-type]
            audit_api(request, action="retract", obj=message)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        operation_id="manage_message_retrieve",
        summary="One message, with its read count",
        responses={200: MessageReadSerializer, **ERRORS(400, 401, 403, 404, 503)},
        examples=[readback.one_example(readback.MESSAGE_EXAMPLE)],
    )
    def get(self, request: Request, message_id: int) -> Response:
        return Response(readback.message_data(manage_selectors.message_manage_get(message_id=message_id)))
