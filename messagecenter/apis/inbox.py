"""The signed-in user's inbox: ``/api/v1/inbox/``."""

from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.fields import DirectRepresentation, OffsetDateTimeField, RefField, StrictInputSerializer, TimeField
from core.api.openapi import ERRORS, ErrorEnvelope, cursor_parameter, limit_parameter, time_parameter
from core.api.params import parse_bool, parse_limit, parse_time
from core.api.translations import reader_language
from messagecenter import group_selectors, selectors, services
from messagecenter.models import CATEGORIES
from messagecenter.readmodel.listing import QUERY_MAX_LENGTH
from messagecenter.services.inbox_actions import BULK_ACTIONS, BULK_MAX_IDS


@extend_schema_field({"type": "string", "maxLength": 32, "example": "approve"})
class ActionIdField(serializers.Field):
    """An action's id: the string the item lists (a bare JSON integer is taken as its digits)."""

    default_error_messages = {"invalid": "An action id is a string the item lists."}

    def to_internal_value(self, data: Any) -> str:
        if isinstance(data, int) and not isinstance(data, bool):
            return str(data)
        if not isinstance(data, str) or not data:
            self.fail("invalid")
        return str(data)

    def to_representation(self, value: Any) -> str:
        return str(value)


KINDS = ("message", "bulletin", "notification")
# Every inbox operation needs the Redis read model.
UNAVAILABLE = {503: OpenApiResponse(ErrorEnvelope, description="Inbox temporarily unavailable (read model down)")}


class ActionSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="A slug of at most 32 characters, unique within the item.")
    label = serializers.CharField(help_text="What the button says (at most 40 characters).")  # type: ignore[assignment]


class ResponseSerializer(serializers.Serializer):
    action = serializers.CharField(help_text="The id of the action answered.")
    at = OffsetDateTimeField()


@extend_schema_field(OpenApiTypes.DATETIME)
class RenderedTimeField(serializers.CharField):
    """A time the selector already wrote as ISO 8601 with an offset."""


class ItemResponseSerializer(serializers.Serializer):
    action = serializers.CharField(help_text="The id of the action answered.")
    at = RenderedTimeField()


class GroupSerializer(serializers.Serializer):
    key = serializers.CharField(help_text="The group key the items were sent with.")
    count = serializers.IntegerField(help_text="Items in the group (this row's item included).")
    actors = serializers.ListField(
        child=serializers.CharField(), help_text="Up to three distinct actors of the group, newest first."
    )


class ItemSerializer(serializers.Serializer):
    id = serializers.CharField()
    kind = serializers.ChoiceField(choices=KINDS)
    category = serializers.CharField()
    title = serializers.CharField()
    summary = serializers.CharField(allow_blank=True)
    created_at = OffsetDateTimeField()
    read = serializers.BooleanField()
    sender = serializers.CharField(
        allow_null=True,
        help_text=(
            "Display name of the operator who sent the message or bulletin (full name, else username); "
            "null for items the system sent (notifications, messages without a sender): clients show "
            "their own localised word for it. Taken when the item was delivered: "
            "a later rename may not show on older items."
        ),
    )
    actions = ActionSerializer(many=True, help_text="What the reader may answer (empty when nothing).")
    response = ItemResponseSerializer(
        allow_null=True, help_text="The reader's answer to one of the actions; null while unanswered."
    )
    group = GroupSerializer(
        allow_null=True,
        help_text=(
            "The row's group when the item was sent with a group_key: while a group is unread, newer items "
            "of its key take its row (it moves to the newest item's time). Reading, archiving, snoozing or "
            "deleting the row does so for the group and ends it: the next item of the key starts a new row. "
            "Null for items without a key. GET /api/v1/inbox/?group_key=<key> lists the group's items."
        ),
    )


class CountsSerializer(serializers.Serializer):
    unread = serializers.IntegerField()
    unseen = serializers.IntegerField()
    by_category = serializers.DictField(child=serializers.IntegerField())
    total_unread = serializers.IntegerField(help_text="unread + unread announcements: the bell's number.")


def _category(raw: str | None) -> str | None:
    if raw in (None, ""):
        return None
    selectors.category_validate(raw)
    return raw


# The list's JSON is generated from ItemSerializer (the one description of an
# item, which the OpenAPI document shows) without DRF's per-field machinery.
_ITEM = DirectRepresentation(ItemSerializer)


def page_payload(page: selectors.InboxPage) -> dict[str, Any]:
    """``InboxListApi.OutputSerializer(page).data``, built from the serializer's
    fields directly (the hot path: see ``_ITEM``)."""
    return {
        "results": [_ITEM.of_object(item) for item in page.results],
        "next_cursor": page.next_cursor,
        "unread_count": page.unread_count,
        "unseen_count": page.unseen_count,
    }


def render_page(page: selectors.InboxPage) -> bytes:
    """The list endpoint's body: ``page_payload`` through the API's JSON renderer."""
    return bytes(JSONRenderer().render(page_payload(page)))


class InboxListApi(APIView):
    class OutputSerializer(serializers.Serializer):
        results = ItemSerializer(many=True)
        next_cursor = serializers.CharField(allow_null=True)
        unread_count = serializers.IntegerField()
        unseen_count = serializers.IntegerField()

    @extend_schema(
        operation_id="inbox_list",
        parameters=[
            OpenApiParameter("category", OpenApiTypes.STR, enum=list(CATEGORIES)),
            OpenApiParameter("unread", OpenApiTypes.BOOL),
            limit_parameter(),
            cursor_parameter(),
            time_parameter("since", "Only items created after this time."),
            OpenApiParameter(
                "archived", OpenApiTypes.BOOL, description="true: the archived items instead of the list."
            ),
            OpenApiParameter(
                "group_key",
                OpenApiTypes.STR,
                description=(
                    "The items sent with this group key (at most 100 characters), newest first, one per row "
                    "(paged like the inbox); the other filters do not apply."
                ),
            ),
            OpenApiParameter(
                "q",
                OpenApiTypes.STR,
                description=(
                    "Only items whose title or summary contains this text (case-insensitive, any language; "
                    f"at most {QUERY_MAX_LENGTH} characters)."
                ),
            ),
        ],
        responses={200: OutputSerializer, **ERRORS(400, 401), **UNAVAILABLE},
    )
    def get(self, request: Request) -> HttpResponse:
        params = request.query_params
        group_key = params.get("group_key")
        if group_key:
            page = group_selectors.inbox_group_list(
                user=request.user,  # type: ignore[arg-type]
                group_key=group_key,
                limit=parse_limit(params.get("limit")),
                cursor=params.get("cursor") or None,
                language=reader_language(request, request.user.pk),
            )
            return HttpResponse(render_page(page), content_type="application/json")
        body = selectors.inbox_list_rendered(
            user=request.user,  # type: ignore[arg-type]
            render=render_page,
            category=_category(params.get("category")),
            unread_only=parse_bool(params.get("unread"), name="unread"),
            limit=parse_limit(params.get("limit")),
            cursor=params.get("cursor") or None,
            since=parse_time(params.get("since"), name="since"),
            archived=parse_bool(params.get("archived"), name="archived"),
            query=params.get("q") or None,
            language=reader_language(request, request.user.pk),
        )
        # Already JSON (the page cache keeps renderings): sent as it is.
        return HttpResponse(body, content_type="application/json")


class InboxItemApi(APIView):
    class OutputSerializer(ItemSerializer):
        body_html = serializers.CharField(allow_blank=True)
        images = serializers.ListField(child=serializers.CharField())
        link = serializers.CharField(allow_null=True)

    @extend_schema(operation_id="inbox_item_get", responses={200: OutputSerializer, **ERRORS(401, 404), **UNAVAILABLE})
    def get(self, request: Request, item_id: str) -> Response:
        item = selectors.inbox_item_get(
            user=request.user,  # type: ignore[arg-type]
            item_id=item_id,
            language=reader_language(request, request.user.pk),
        )
        return Response(self.OutputSerializer(item).data)

    @extend_schema(operation_id="inbox_item_hide", responses={204: None, **ERRORS(401, 404), **UNAVAILABLE})
    def delete(self, request: Request, item_id: str) -> Response:
        services.inbox_hide(user=request.user, item_id=item_id)  # type: ignore[arg-type]
        return Response(status=status.HTTP_204_NO_CONTENT)


class InboxItemReadApi(APIView):
    @extend_schema(
        operation_id="inbox_item_read", request=None, responses={204: None, **ERRORS(401, 404), **UNAVAILABLE}
    )
    def post(self, request: Request, item_id: str) -> Response:
        services.inbox_mark_read(user=request.user, item_id=item_id)  # type: ignore[arg-type]
        return Response(status=status.HTTP_204_NO_CONTENT)


class InboxItemUnreadApi(APIView):
    @extend_schema(
        operation_id="inbox_item_unread", request=None, responses={204: None, **ERRORS(401, 404), **UNAVAILABLE}
    )
    def post(self, request: Request, item_id: str) -> Response:
        services.inbox_mark_unread(user=request.user, item_id=item_id)  # type: ignore[arg-type]
        return Response(status=status.HTTP_204_NO_CONTENT)


class InboxItemArchiveApi(APIView):
    @extend_schema(
        operation_id="inbox_item_archive", request=None, responses={204: None, **ERRORS(401, 404), **UNAVAILABLE}
    )
    def post(self, request: Request, item_id: str) -> Response:
        services.inbox_archive(user=request.user, item_id=item_id)  # type: ignore[arg-type]
        return Response(status=status.HTTP_204_NO_CONTENT)


class InboxItemUnarchiveApi(APIView):
    @extend_schema(
        operation_id="inbox_item_unarchive", request=None, responses={204: None, **ERRORS(401, 404), **UNAVAILABLE}
    )
    def post(self, request: Request, item_id: str) -> Response:
        services.inbox_unarchive(user=request.user, item_id=item_id)  # type: ignore[arg-type]
        return Response(status=status.HTTP_204_NO_CONTENT)


class InboxItemSnoozeApi(APIView):
    class InputSerializer(StrictInputSerializer):
        until = TimeField(
            help_text="When the item comes back (unread, at the top of the list): in the future, within a year. "
            "ISO 8601 (without an offset: UTC), from 1970-01-01 up to 2100-01-01."
        )

    @extend_schema(
        operation_id="inbox_item_snooze",
        request=InputSerializer,
        responses={204: None, **ERRORS(400, 401, 404), **UNAVAILABLE},
    )
    def post(self, request: Request, item_id: str) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        services.inbox_snooze(
            user=request.user,  # type: ignore[arg-type]
            item_id=item_id,
            until=serializer.validated_data["until"],
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class InboxBulkApi(APIView):
    class InputSerializer(StrictInputSerializer):
        action = serializers.ChoiceField(choices=BULK_ACTIONS)
        ids = serializers.ListField(
            child=RefField(), min_length=1, max_length=BULK_MAX_IDS, help_text="Item ids as the API returned them."
        )

    class OutputSerializer(serializers.Serializer):
        done = serializers.IntegerField(help_text="How many of the given ids are in this user's inbox.")

    @extend_schema(
        operation_id="inbox_bulk",
        request=InputSerializer,
        responses={200: OutputSerializer, **ERRORS(400, 401), **UNAVAILABLE},
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        done = services.inbox_bulk(
            user=request.user,  # type: ignore[arg-type]
            action=serializer.validated_data["action"],
            item_ids=serializer.validated_data["ids"],
        )
        return Response(self.OutputSerializer({"done": done}).data)


class InboxReadAllApi(APIView):
    class InputSerializer(StrictInputSerializer):
        category = serializers.ChoiceField(choices=CATEGORIES, required=False)

    class OutputSerializer(serializers.Serializer):
        marked = serializers.IntegerField()

    @extend_schema(
        operation_id="inbox_read_all",
        request=InputSerializer,
        responses={200: OutputSerializer, **ERRORS(400, 401), **UNAVAILABLE},
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        marked = services.inbox_mark_all_read(
            user=request.user,  # type: ignore[arg-type]
            category=serializer.validated_data.get("category"),
        )
        return Response(self.OutputSerializer({"marked": marked}).data)


class InboxSeenApi(APIView):
    @extend_schema(operation_id="inbox_seen", request=None, responses={204: None, **ERRORS(401), **UNAVAILABLE})
    def post(self, request: Request) -> Response:
        services.inbox_mark_seen(user=request.user)  # type: ignore[arg-type]
        return Response(status=status.HTTP_204_NO_CONTENT)


class InboxCountsApi(APIView):
    class OutputSerializer(CountsSerializer):
        pass

    @extend_schema(operation_id="inbox_counts", responses={200: OutputSerializer, **ERRORS(401), **UNAVAILABLE})
    def get(self, request: Request) -> Response:
        counts: dict[str, Any] = selectors.inbox_counts(user=request.user)  # type: ignore[arg-type]
        return Response(self.OutputSerializer(counts).data)


class InboxItemRespondApi(APIView):
    class InputSerializer(StrictInputSerializer):
        action = ActionIdField(help_text="The id of one of the item's actions.")

    @extend_schema(
        operation_id="inbox_item_respond",
        summary="Answer one of the item's actions (once; also marks it read)",
        request=InputSerializer,
        responses={200: ResponseSerializer, **ERRORS(400, 401, 404, 409), **UNAVAILABLE},
    )
    def post(self, request: Request, item_id: str) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        answer = services.message_respond(
            user=request.user,  # type: ignore[arg-type]
            item_id=item_id,
            action=serializer.validated_data["action"],
        )
        return Response(ResponseSerializer({"action": answer.action, "at": answer.at}).data)
