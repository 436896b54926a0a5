"""The audit log's API: the list and its CSV export."""

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.selectors import audit_list
from audit.trail import audit_csv
from core.api.fields import OffsetDateTimeField
from core.api.openapi import ERRORS, example, filter_parameter, list_parameters, page_serializer
from core.api.pagination import list_response
from core.api.params import parse_text, parse_time
from core.api.permissions import IsOperator


class AuditEntrySerializer(serializers.Serializer):
    """One audit entry (OpenAPI component ``AuditEntry``)."""

    id = serializers.CharField()
    actor = serializers.CharField(source="actor_name", help_text="Username of the operator; empty for none.")
    action = serializers.CharField(help_text="create, update, delete, or a named action (publish, members_add, ...)")
    object_type = serializers.CharField(help_text="app_label.model, e.g. messagecenter.message")
    object_id = serializers.CharField()
    object_repr = serializers.CharField()
    at = OffsetDateTimeField()
    changes = serializers.JSONField(help_text="What the write changed (long values cut).")
    via = serializers.ChoiceField(source="source", choices=["api", "admin"], help_text="Where the write came in.")
    path = serializers.CharField()
    ip = serializers.CharField(allow_null=True)


_AUDIT_EXAMPLE = {
    "id": "41",
    "actor": "olivia-operator",
    "action": "create",
    "object_type": "messagecenter.message",
    "object_id": "311",
    "object_repr": "Maintenance tonight",
    "at": "2026-11-22T10:00:00+00:00",
    "changes": {"title": "Maintenance tonight", "category": "system"},
    "via": "api",
    "path": "/api/v1/manage/messages/",
    "ip": "203.0.113.7",
}


AUDIT_FILTERS = list_parameters(
    filter_parameter("actor", "Only entries of this operator (username)."),
    filter_parameter("action", "Only this action (create, update, delete, publish, members_add, ...)."),
    filter_parameter("object_type", "Only this type (app_label.model, e.g. messagecenter.message)."),
    filter_parameter("object_id", "Only entries about this object id (with object_type)."),
)


# The export is one response, not a page: bounded so it stays one.
AUDIT_EXPORT_MAX = 50_000


class AuditListApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("audit.view_auditentry",)

    @extend_schema(
        operation_id="manage_audit_list",
        summary="The audit log of operator writes",
        description="Every operator write through the manage API or Django admin, newest first.",
        parameters=AUDIT_FILTERS,
        responses={200: page_serializer("AuditPage", AuditEntrySerializer), **ERRORS(400, 401, 403)},
        examples=[example("A page", {"results": [_AUDIT_EXAMPLE], "next_cursor": None})],
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        return list_response(
            request,
            audit_list,
            lambda rows: AuditEntrySerializer(rows, many=True).data,
            actor=parse_text(params.get("actor"), name="actor", max_length=150),
            action=parse_text(params.get("action"), name="action", max_length=64),
            object_type=parse_text(params.get("object_type"), name="object_type", max_length=100),
            object_id=parse_text(params.get("object_id"), name="object_id", max_length=64),
            since=parse_time(params.get("since"), name="since"),
        )


class AuditExportApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("audit.view_auditentry",)

    @extend_schema(
        operation_id="manage_audit_export",
        summary="The audit log as CSV",
        description=f"The entries the filters select, newest first, at most {AUDIT_EXPORT_MAX} rows "
        "(narrow with `since` for more).",
        parameters=[p for p in AUDIT_FILTERS if p.name not in {"limit", "cursor"}],
        responses={
            (200, "text/csv"): OpenApiResponse(
                OpenApiTypes.STR,
                description="One header row, then one row per entry.",
                examples=[
                    OpenApiExample(
                        "CSV",
                        value="id,at,actor,action,object_type,object_id,object_repr,source,path,ip,changes\r\n"
                        "41,2026-11-22T10:00:00+00:00,olivia-operator,create,messagecenter.message,311,"
                        'Maintenance tonight,api,/api/v1/manage/messages/,203.0.113.7,"{""title"": ""Hi""}"\r\n',
                    )
                ],
            ),
            **ERRORS(400, 401, 403),
        },
    )
    def get(self, request: Request) -> HttpResponse:
        params = request.query_params
        page = audit_list(
            limit=AUDIT_EXPORT_MAX,
            cursor=None,
            actor=parse_text(params.get("actor"), name="actor", max_length=150),
            action=parse_text(params.get("action"), name="action", max_length=64),
            object_type=parse_text(params.get("object_type"), name="object_type", max_length=100),
            object_id=parse_text(params.get("object_id"), name="object_id", max_length=64),
            since=parse_time(params.get("since"), name="since"),
        )
        response = HttpResponse(audit_csv(page.items), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="audit.csv"'
        return response
