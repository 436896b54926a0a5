"""Operators: who has not read a message or bulletin yet, and a reminder to them.

``GET /api/v1/manage/{messages,bulletins}/<id>/unread-recipients/`` pages the
audience members who have not read the item (``?format=csv``: all of them as
CSV); ``POST .../remind/`` sends them a follow-up message through
``message_send`` (idempotent with a key, audited in the send's transaction).
"""

import itertools
from typing import Any, ClassVar

from django.db import transaction
from django.db.models import Model
from django.http import StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.trail import audit_api
from core.api.fields import StrictCharField, StrictInputSerializer
from core.api.openapi import ERRORS, cursor_parameter, example, limit_parameter
from core.api.pagination import decode_cursor, encode_cursor
from core.api.params import parse_choice, parse_limit
from core.api.permissions import IsOperator
from messagecenter import insight, services
from messagecenter.apis.manage import IDEMPOTENCY_HEADER, MessageSendApi, message_state
from messagecenter.models import Bulletin, Message


class UnreadUserSerializer(serializers.Serializer):
    id = serializers.CharField()
    username = serializers.CharField()


class UnreadPageSerializer(serializers.Serializer):
    results = UnreadUserSerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True)


_UNREAD_EXAMPLE = {"results": [{"id": "42", "username": "alice"}], "next_cursor": None}


def _item_of(model: type[Model], item_id: int) -> Any:
    return get_object_or_404(model, pk=item_id)


class _UnreadApi(APIView):
    permission_classes = [IsOperator]
    model: ClassVar[type[Message] | type[Bulletin]]

    def perform_content_negotiation(self, request: Request, force: bool = False) -> tuple[Any, str]:
        # ``format=csv`` is this view's own choice, not DRF's renderer override
        # (which would answer 404 for a format it has no renderer for).
        renderer = JSONRenderer()
        return renderer, renderer.media_type

    def get(self, request: Request, item_id: int) -> HttpResponseBase:
        params = request.query_params
        wanted = parse_choice(params.get("format"), name="format", choices=("json", "csv")) or "json"
        item = _item_of(self.model, item_id)
        scope = f"unread-{item.ref}"
        if wanted == "csv":
            # Streamed: rows go out batch by batch. The first batch is read here,
            # so a message never sent (409) or Redis down (503) is still an envelope.
            users = insight.item_unread_all(item=item)
            first = next(users, None)
            rest = users if first is None else itertools.chain([first], users)
            response = StreamingHttpResponse(insight.unread_csv_rows(rest), content_type="text/csv; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="unread-{item.ref}.csv"'
            return response
        limit = parse_limit(params.get("limit"))
        raw = params.get("cursor")
        after = decode_cursor(raw, scope=scope).get("after") if raw else 0
        page = insight.item_unread_page(item=item, after_id=after if isinstance(after, int) else 0, limit=limit)
        next_cursor = None if page.next_after is None else encode_cursor({"after": page.next_after}, scope=scope)
        results = [{"id": pk, "username": username} for pk, username in page.users]
        return Response(UnreadPageSerializer({"results": results, "next_cursor": next_cursor}).data)


_UNREAD_PARAMETERS = [
    limit_parameter(),
    cursor_parameter(),
    OpenApiParameter(
        "format",
        OpenApiTypes.STR,
        enum=["json", "csv"],
        description="csv: every member of the audience who has not read it (id, username), one response, no paging.",
    ),
]


def _unread_schema(kind: str) -> Any:
    return extend_schema(
        operation_id=f"manage_{kind}_unread_recipients",
        summary=f"Who has not read the {kind} yet",
        description=f"Members of the {kind}'s audience whose read state says they have never opened it "
        "(the same read state as its read count), in user-id order. "
        + (
            "The audience of a message to users and groups is the one resolved when it was sent; "
            "of a message to everyone, the active users now. A scheduled message is 409."
            if kind == "message"
            else "The audience is the active members of its groups now, or every active user."
        ),
        parameters=_UNREAD_PARAMETERS,
        responses={
            200: UnreadPageSerializer,
            (200, "text/csv"): OpenApiResponse(
                OpenApiTypes.STR,
                description="With format=csv: one header row, then one row per user.",
                examples=[OpenApiExample("CSV", value="id,username\r\n42,alice\r\n")],
            ),
            **ERRORS(400, 401, 403, 404, 409, 503),
        },
        examples=[example("A page", _UNREAD_EXAMPLE)],
    )


@extend_schema_view(get=_unread_schema("message"))
class MessageUnreadApi(_UnreadApi):
    model = Message
    required_permissions = ("messagecenter.view_message",)


@extend_schema_view(get=_unread_schema("bulletin"))
class BulletinUnreadApi(_UnreadApi):
    model = Bulletin
    required_permissions = ("messagecenter.view_bulletin",)


class RemindInputSerializer(StrictInputSerializer):
    title = StrictCharField(max_length=200, required=False, help_text='Default: "Reminder: " and its title.')
    idempotency_key = StrictCharField(
        max_length=200,
        required=False,
        help_text="A retry with the same key within 24 hours sends nothing and answers 200 with the first "
        "reminder (the Idempotency-Key header means the same).",
    )


_REMIND_ANSWER = {"id": "312", "delivery": "push", "recipients": 8, "status": "queued", "send_at": None}


class _RemindApi(APIView):
    permission_classes = [IsOperator]
    model: ClassVar[type[Message] | type[Bulletin]]

    def post(self, request: Request, item_id: int) -> Response:
        item = _item_of(self.model, item_id)
        # No body is an empty object (DRF parses it as one); any JSON that is
        # not an object, even a falsy one ([], null), is refused by the serializer.
        serializer = RemindInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        key = MessageSendApi.key_of(request, data.pop("idempotency_key", None))

        def send() -> Message:
            reminder = services.item_remind(item=item, actor=request.user, title=data.get("title"))  # type: ignore[arg-type]
            changes = {"reminder_of": item.ref, "recipients": reminder.audience_size, "idempotency_key": key}
            audit_api(request, action="create", obj=reminder, changes={**data, **changes})
            audit_api(request, action="remind", obj=item, changes={"reminder": reminder.pk, **changes})
            return reminder

        with transaction.atomic():
            if key is None:
                reminder, created = send(), True
            else:
                fingerprint = services.request_fingerprint({"remind": item.ref, **data})
                reminder, created = services.message_send_once(key=key, fingerprint=fingerprint, send=send)
        code = status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK
        return Response(MessageSendApi.OutputSerializer(message_state(reminder)).data, status=code)


def _remind_schema(kind: str) -> Any:
    return extend_schema(
        operation_id=f"manage_{kind}_remind",
        summary=f"Remind those who have not read the {kind} yet",
        description=f"Sends a follow-up message to the members of the {kind}'s audience who have not read it "
        "now (the users GET unread-recipients lists), through the ordinary send: 202 and the new message. "
        "With an idempotency key (body or `Idempotency-Key` header) a repeat within 24 hours sends nothing "
        "and answers 200 with the first reminder. 409 `all_read` when everyone has read it (nothing is sent)"
        + ("; 409 `not_sent` for a scheduled message." if kind == "message" else "."),
        request=RemindInputSerializer,
        parameters=[
            OpenApiParameter(
                IDEMPOTENCY_HEADER,
                OpenApiTypes.STR,
                location=OpenApiParameter.HEADER,
                description="Same meaning as the body's `idempotency_key`.",
            )
        ],
        responses={
            202: MessageSendApi.OutputSerializer,
            200: MessageSendApi.OutputSerializer,
            **ERRORS(400, 401, 403, 404, 409, 503),
        },
        examples=[
            OpenApiExample("Reminded", value=_REMIND_ANSWER, response_only=True, status_codes=["202"]),
            OpenApiExample("No body", value={}, request_only=True),
        ],
    )


@extend_schema_view(post=_remind_schema("message"))
class MessageRemindApi(_RemindApi):
    model = Message
    # It sends a message: the send permission, and reading the original.
    required_permissions = ("messagecenter.add_message", "messagecenter.view_message")


@extend_schema_view(post=_remind_schema("bulletin"))
class BulletinRemindApi(_RemindApi):
    model = Bulletin
    required_permissions = ("messagecenter.add_message", "messagecenter.view_bulletin")
