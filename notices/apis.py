"""REST adapters of announcements: validate, call one service or selector, render."""

from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.platforms import ALL_PLATFORMS
from audit.trail import audit_api
from core.api.fields import (
    DirectRepresentation,
    OffsetDateTimeField,
    StrictBooleanField,
    StrictCharField,
    StrictInputSerializer,
    TimeField,
    TranslationsField,
)
from core.api.openapi import (
    ERRORS,
    cursor_parameter,
    example,
    filter_parameter,
    limit_parameter,
    list_parameters,
    page_serializer,
)
from core.api.params import parse_bool, parse_choice, parse_limit, parse_time
from core.api.permissions import IsOperator
from core.api.translations import localized, reader_language
from notices import selectors, services
from notices.models import Announcement
from notices.selectors import ANNOUNCEMENT_STATUSES

# The same cap as bulletins and messages: rich HTML bodies are pages, not files.
MAX_BODY = 100_000


def _platforms_field(*, required: bool = True) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.ChoiceField(choices=ALL_PLATFORMS),
        allow_empty=False,
        max_length=len(ALL_PLATFORMS),
        required=required,
    )


def _item(item: selectors.AnnouncementItem, language: str | None = None) -> dict[str, Any]:
    """An announcement with its body: what a list shows of it, and the body (in the reader's language)."""
    announcement = item.announcement
    listed = selectors.AnnouncementListItem(selectors.AnnouncementSummary.of(announcement), item.read)
    shown = localized({"body_html": announcement.body_html}, announcement.translations, language)
    return {**_list_item(listed, language), "body_html": shown["body_html"]}


def _list_item(item: selectors.AnnouncementListItem, language: str | None = None) -> dict[str, Any]:
    summary = item.announcement
    shown = summary.shown(language) if summary.translations else {"title": summary.title, "summary": summary.summary}
    return {
        "id": str(summary.pk),
        "title": shown["title"],
        "summary": shown["summary"],
        "published_at": summary.publish_at,
        "pinned": summary.pinned,
        "read": item.read,
    }


# --- the signed-in user's announcements ----------------------------------------------


class AnnouncementItemSerializer(serializers.Serializer):
    """The API's ``Announcement`` object (OpenAPI component ``AnnouncementItem``)."""

    id = serializers.CharField()
    title = serializers.CharField()
    summary = serializers.CharField()
    published_at = OffsetDateTimeField()
    pinned = serializers.BooleanField()
    read = serializers.BooleanField()


# A list item's JSON, generated from its serializer (see DirectRepresentation).
_LIST_ITEM = DirectRepresentation(AnnouncementItemSerializer)


class AnnouncementListApi(APIView):
    class OutputSerializer(serializers.Serializer):
        results = AnnouncementItemSerializer(many=True)
        next_cursor = serializers.CharField(allow_null=True)

    @extend_schema(
        operation_id="announcements_list",
        description="Live announcements of the user's platforms, newest first by publish time "
        "(pinned ones are not moved up; `pinned` flags them).",
        parameters=[
            limit_parameter(),
            cursor_parameter(),
        ],
        responses={200: OutputSerializer, **ERRORS(400, 401)},
    )
    def get(self, request: Request) -> HttpResponse:
        limit = parse_limit(request.query_params.get("limit"))
        page = selectors.announcement_list(user=request.user, limit=limit, cursor=request.query_params.get("cursor"))
        language = reader_language(request, request.user.pk)
        return HttpResponse(render_list(page, language), content_type="application/json")


def render_list(page: selectors.AnnouncementPage, language: str | None = None) -> bytes:
    """The list endpoint's body, through the API's JSON renderer."""
    body = {
        "results": [_LIST_ITEM.of_mapping(_list_item(item, language)) for item in page.items],
        "next_cursor": page.next_cursor,
    }
    return bytes(JSONRenderer().render(body))


class AnnouncementDetailApi(APIView):
    class OutputSerializer(serializers.Serializer):
        id = serializers.CharField()
        title = serializers.CharField()
        summary = serializers.CharField()
        published_at = OffsetDateTimeField()
        pinned = serializers.BooleanField()
        read = serializers.BooleanField()
        body_html = serializers.CharField()

    @extend_schema(
        operation_id="announcements_retrieve",
        description="Reading does not mark it read (POST .../read/ does).",
        responses={200: OutputSerializer, **ERRORS(400, 401, 404)},
    )
    def get(self, request: Request, announcement_id: int) -> Response:
        item = selectors.announcement_get(user=request.user, announcement_id=announcement_id)
        return Response(self.OutputSerializer(_item(item, reader_language(request, request.user.pk))).data)


class AnnouncementMarkReadApi(APIView):
    @extend_schema(operation_id="announcements_mark_read", request=None, responses={204: None, **ERRORS(400, 401, 404)})
    def post(self, request: Request, announcement_id: int) -> Response:
        services.announcement_mark_read(user=request.user, announcement_id=announcement_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AnnouncementMarkUnreadApi(APIView):
    @extend_schema(
        operation_id="announcements_mark_unread", request=None, responses={204: None, **ERRORS(400, 401, 404)}
    )
    def post(self, request: Request, announcement_id: int) -> Response:
        services.announcement_mark_unread(user=request.user, announcement_id=announcement_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AnnouncementCountsApi(APIView):
    class OutputSerializer(serializers.Serializer):
        read = serializers.IntegerField()
        unread = serializers.IntegerField()

    @extend_schema(operation_id="announcements_counts", responses={200: OutputSerializer, **ERRORS(400, 401)})
    def get(self, request: Request) -> Response:
        return Response(self.OutputSerializer(selectors.announcement_counts(user=request.user)).data)


# --- operators ------------------------------------------------------------------------


class ManageAnnouncementOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    title = serializers.CharField()
    summary = serializers.CharField()
    body_html = serializers.CharField()
    platforms = serializers.ListField(child=serializers.CharField())
    publish_at = OffsetDateTimeField()
    expire_at = OffsetDateTimeField(allow_null=True)
    pinned = serializers.BooleanField()
    status = serializers.CharField(help_text="scheduled, live or expired")
    created_at = OffsetDateTimeField()
    updated_at = OffsetDateTimeField()
    translations = TranslationsField()


def _manage_body(announcement: Announcement) -> dict[str, Any]:
    return {
        "id": str(announcement.pk),
        "title": announcement.title,
        "summary": announcement.summary,
        "body_html": announcement.body_html,
        "platforms": announcement.platforms,
        "publish_at": announcement.publish_at,
        "expire_at": announcement.expire_at,
        "pinned": announcement.pinned,
        "status": announcement.status_at(datetime.now(UTC)),
        "created_at": announcement.created_at,
        "updated_at": announcement.updated_at,
        "translations": dict(announcement.translations or {}),
    }


_ANNOUNCEMENT_EXAMPLE = {
    "id": "12",
    "title": "Maintenance tonight",
    "summary": "The service pauses from 22:00 to 23:00 UTC.",
    "body_html": "<p>The service pauses from 22:00 to 23:00 UTC.</p>",
    "platforms": ["user", "customer"],
    "publish_at": "2026-11-22T10:00:00+00:00",
    "expire_at": None,
    "pinned": False,
    "status": "live",
    "created_at": "2026-11-22T09:58:00+00:00",
    "updated_at": "2026-11-22T09:58:00+00:00",
}


class AnnouncementCreateApi(APIView):
    """GET (operators' list) and POST (create) share the path."""

    permission_classes = [IsOperator]

    @property
    def required_permissions(self) -> tuple[str, ...]:
        method = getattr(self.request, "method", "")
        return ("notices.view_announcement",) if method in {"GET", "HEAD"} else ("notices.add_announcement",)

    class InputSerializer(StrictInputSerializer):
        title = StrictCharField(max_length=200)
        body_html = StrictCharField(max_length=MAX_BODY)
        summary = StrictCharField(max_length=300, required=False, allow_blank=True)
        platforms = _platforms_field()
        publish_at = TimeField(required=False, allow_null=True)
        expire_at = TimeField(required=False, allow_null=True)
        pinned = StrictBooleanField(required=False)
        translations = TranslationsField(required=False)

    class OutputSerializer(ManageAnnouncementOutputSerializer):
        pass

    @extend_schema(
        operation_id="manage_announcements_create",
        description="Without `publish_at` it is published now; a future one is visible only from then on.",
        request=InputSerializer,
        responses={201: OutputSerializer, **ERRORS(400, 401, 403)},
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        with transaction.atomic():
            announcement = services.announcement_create(author=request.user, **serializer.validated_data)
            audit_api(request, action="create", obj=announcement, changes=serializer.validated_data)
        return Response(self.OutputSerializer(_manage_body(announcement)).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="manage_announcements_list",
        summary="Every announcement, newest first",
        description="All announcements whatever their state (scheduled, live, expired), newest created first.",
        parameters=list_parameters(
            filter_parameter("status", "Only announcements in this state now.", enum=list(ANNOUNCEMENT_STATUSES)),
            filter_parameter("platform", "Only those targeting this platform.", enum=list(ALL_PLATFORMS)),
            filter_parameter("pinned", "true or false.", kind=OpenApiTypes.BOOL),
        ),
        responses={
            200: page_serializer("ManageAnnouncementPage", ManageAnnouncementOutputSerializer),
            **ERRORS(400, 401, 403),
        },
        examples=[example("A page", {"results": [_ANNOUNCEMENT_EXAMPLE], "next_cursor": None})],
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        pinned = params.get("pinned")
        page = selectors.announcement_manage_list(
            limit=parse_limit(params.get("limit")),
            cursor=params.get("cursor"),
            status=parse_choice(params.get("status"), name="status", choices=ANNOUNCEMENT_STATUSES),
            platform=parse_choice(params.get("platform"), name="platform", choices=ALL_PLATFORMS),
            pinned=None if pinned in (None, "") else parse_bool(pinned, name="pinned"),
            since=parse_time(params.get("since"), name="since"),
        )
        results = [ManageAnnouncementOutputSerializer(_manage_body(a)).data for a in page.items]
        return Response({"results": results, "next_cursor": page.next_cursor})


class AnnouncementManageApi(APIView):
    """GET (read back), PATCH (change) and DELETE of one announcement share a path,
    so they share a class; each method declares its own permission and schema."""

    permission_classes = [IsOperator]

    @property
    def required_permissions(self) -> tuple[str, ...]:
        method = getattr(self.request, "method", "")
        if method in {"GET", "HEAD"}:
            return ("notices.view_announcement",)
        return ("notices.delete_announcement",) if method == "DELETE" else ("notices.change_announcement",)

    class InputSerializer(StrictInputSerializer):
        title = StrictCharField(max_length=200, required=False)
        body_html = StrictCharField(max_length=MAX_BODY, required=False)
        summary = StrictCharField(max_length=300, required=False, allow_blank=True)
        platforms = _platforms_field(required=False)
        publish_at = TimeField(required=False, allow_null=True)
        expire_at = TimeField(required=False, allow_null=True)
        pinned = StrictBooleanField(required=False)
        translations = TranslationsField(required=False, help_text="Replaces every translation ({} drops them).")

    class OutputSerializer(ManageAnnouncementOutputSerializer):
        pass

    def _get(self, announcement_id: int) -> Announcement:
        return get_object_or_404(Announcement.objects.prefetch_related("platform_rows"), pk=announcement_id)

    @extend_schema(
        operation_id="manage_announcements_update",
        request=InputSerializer,
        responses={200: OutputSerializer, **ERRORS(400, 401, 403, 404)},
    )
    def patch(self, request: Request, announcement_id: int) -> Response:
        announcement = self._get(announcement_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        with transaction.atomic():
            announcement = services.announcement_update(announcement=announcement, **serializer.validated_data)
            audit_api(request, action="update", obj=announcement, changes=serializer.validated_data)
        announcement = self._get(announcement.pk)
        return Response(self.OutputSerializer(_manage_body(announcement)).data)

    @extend_schema(operation_id="manage_announcements_delete", responses={204: None, **ERRORS(401, 403, 404)})
    def delete(self, request: Request, announcement_id: int) -> Response:
        announcement = self._get(announcement_id)
        with transaction.atomic():
            audit_api(request, action="delete", obj=announcement)
            services.announcement_delete(announcement=announcement)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        operation_id="manage_announcements_retrieve",
        summary="One announcement as operators see it",
        responses={200: OutputSerializer, **ERRORS(400, 401, 403, 404)},
        examples=[example("An announcement", _ANNOUNCEMENT_EXAMPLE)],
    )
    def get(self, request: Request, announcement_id: int) -> Response:
        announcement = selectors.announcement_manage_get(announcement_id=announcement_id)
        return Response(self.OutputSerializer(_manage_body(announcement)).data)


class AnnouncementPlatformStatsSerializer(serializers.Serializer):
    read = serializers.IntegerField()
    users = serializers.IntegerField()
    ratio = serializers.FloatField()


class AnnouncementStatsApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("notices.view_announcement",)

    class OutputSerializer(serializers.Serializer):
        read_total = serializers.IntegerField()
        by_platform = serializers.DictField(child=AnnouncementPlatformStatsSerializer())

    @extend_schema(
        operation_id="manage_announcements_stats",
        description="Readers per targeted platform; `read_total` adds the platforms up.",
        responses={200: OutputSerializer, **ERRORS(401, 403, 404)},
    )
    def get(self, request: Request, announcement_id: int) -> Response:
        announcement = get_object_or_404(Announcement.objects.prefetch_related("platform_rows"), pk=announcement_id)
        return Response(self.OutputSerializer(selectors.announcement_stats(announcement=announcement)).data)
