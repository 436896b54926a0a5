"""The webhooks' manage API."""

from typing import Any

from django.db import transaction
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.trail import audit_api
from core.api.fields import StrictBooleanField, StrictCharField, StrictInputSerializer
from core.api.openapi import ERRORS, cursor_parameter, limit_parameter
from core.api.pagination import list_response
from core.api.permissions import IsOperator
from webhooks import services as webhooks
from webhooks.models import WebhookEndpoint


class WebhookOutputSerializer(serializers.Serializer):
    id = serializers.CharField()
    url = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    events = serializers.ListField(child=serializers.ChoiceField(choices=webhooks.EVENTS))
    active = serializers.BooleanField()
    consecutive_failures = serializers.IntegerField()
    disabled_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


class WebhookCreatedSerializer(WebhookOutputSerializer):
    secret = serializers.CharField(help_text="The signing secret (whsec_...): shown only in this answer.")


def _endpoint_data(endpoint: WebhookEndpoint) -> dict[str, Any]:
    return {
        "id": endpoint.pk,
        "url": endpoint.url,
        "description": endpoint.description,
        "events": endpoint.events,
        "active": endpoint.active,
        "consecutive_failures": endpoint.consecutive_failures,
        "disabled_at": endpoint.disabled_at,
        "created_at": endpoint.created_at,
    }


class WebhookListApi(APIView):
    permission_classes = [IsOperator]

    @property
    def required_permissions(self) -> tuple[str, ...]:
        method = self.request.method if self.request else "GET"
        return ("webhooks.add_webhookendpoint",) if method == "POST" else ("webhooks.view_webhookendpoint",)

    class InputSerializer(StrictInputSerializer):
        url = StrictCharField(max_length=500)
        events = serializers.ListField(child=StrictCharField(max_length=64), max_length=len(webhooks.EVENTS) * 2)
        description = StrictCharField(max_length=200, required=False, allow_blank=True)
        active = StrictBooleanField(required=False, default=True)

    class PageSerializer(serializers.Serializer):
        results = WebhookOutputSerializer(many=True)
        next_cursor = serializers.CharField(allow_null=True)

    @extend_schema(
        operation_id="manage_webhook_list",
        summary="List webhook endpoints, newest first",
        parameters=[limit_parameter(), cursor_parameter()],
        responses={200: PageSerializer, **ERRORS(400, 401, 403)},
    )
    def get(self, request: Request) -> Response:
        return list_response(
            request,
            webhooks.webhook_endpoint_list,
            lambda rows: WebhookOutputSerializer([_endpoint_data(e) for e in rows], many=True).data,
        )

    @extend_schema(
        operation_id="manage_webhook_create",
        summary="Register a webhook endpoint",
        description=(
            "Events: " + ", ".join(webhooks.EVENTS) + ". The answer carries the signing secret once; "
            "deliveries are signed per Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature)."
        ),
        request=InputSerializer,
        responses={201: WebhookCreatedSerializer, **ERRORS(400, 401, 403)},
        examples=[
            OpenApiExample(
                "Messages sent and read",
                value={"url": "https://hooks.example.com/mc", "events": ["message.sent", "message.read"]},
                request_only=True,
            )
        ],
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        with transaction.atomic():
            endpoint = webhooks.webhook_endpoint_create(
                url=data["url"], events=data["events"], description=data.get("description", ""), active=data["active"]
            )
            # The secret is never written to the audit log.
            audit_api(request, action="create", obj=endpoint, changes={k: v for k, v in data.items() if k != "secret"})
        out = {**_endpoint_data(endpoint), "secret": endpoint.secret}
        return Response(WebhookCreatedSerializer(out).data, status=status.HTTP_201_CREATED)


class WebhookDetailApi(APIView):
    permission_classes = [IsOperator]

    @property
    def required_permissions(self) -> tuple[str, ...]:
        method = (self.request.method if self.request else None) or "GET"
        return {
            "DELETE": ("webhooks.delete_webhookendpoint",),
            "PATCH": ("webhooks.change_webhookendpoint",),
        }.get(method, ("webhooks.view_webhookendpoint",))

    class InputSerializer(StrictInputSerializer):
        url = StrictCharField(max_length=500, required=False)
        events = serializers.ListField(
            child=StrictCharField(max_length=64), required=False, max_length=len(webhooks.EVENTS) * 2
        )
        description = StrictCharField(max_length=200, required=False, allow_blank=True)
        active = StrictBooleanField(required=False)

    @extend_schema(
        operation_id="manage_webhook_detail",
        summary="A webhook endpoint (without its secret)",
        responses={200: WebhookOutputSerializer, **ERRORS(401, 403, 404)},
    )
    def get(self, request: Request, webhook_id: int) -> Response:
        endpoint = get_object_or_404(WebhookEndpoint, pk=webhook_id)
        return Response(WebhookOutputSerializer(_endpoint_data(endpoint)).data)

    @extend_schema(
        operation_id="manage_webhook_update",
        summary="Change a webhook endpoint; active=true turns a disabled one on again",
        request=InputSerializer,
        responses={200: WebhookOutputSerializer, **ERRORS(400, 401, 403, 404)},
    )
    def patch(self, request: Request, webhook_id: int) -> Response:
        endpoint = get_object_or_404(WebhookEndpoint, pk=webhook_id)
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        with transaction.atomic():
            endpoint = webhooks.webhook_endpoint_update(endpoint=endpoint, data=serializer.validated_data)
            audit_api(request, action="update", obj=endpoint, changes=serializer.validated_data)
        return Response(WebhookOutputSerializer(_endpoint_data(endpoint)).data)

    @extend_schema(
        operation_id="manage_webhook_delete",
        summary="Delete a webhook endpoint and its delivery log",
        responses={204: None, **ERRORS(401, 403, 404)},
    )
    def delete(self, request: Request, webhook_id: int) -> Response:
        endpoint = get_object_or_404(WebhookEndpoint, pk=webhook_id)
        with transaction.atomic():
            audit_api(request, action="delete", obj=endpoint)
            webhooks.webhook_endpoint_delete(endpoint=endpoint)
        return Response(status=status.HTTP_204_NO_CONTENT)
