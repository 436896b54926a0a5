"""Operators: the answers to a message's actions, ``/api/v1/manage/messages/{id}/responses/``."""

from typing import Any

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.fields import OffsetDateTimeField
from core.api.openapi import ERRORS, list_parameters
from core.api.params import parse_limit
from core.api.permissions import IsOperator
from messagecenter import manage_selectors
from messagecenter.models import Message, MessageResponse


class ResponderSerializer(serializers.Serializer):
    id = serializers.CharField()
    username = serializers.CharField()


class ResponseRowSerializer(serializers.Serializer):
    user = ResponderSerializer()
    action = serializers.CharField()
    at = OffsetDateTimeField()


class ResponsesPageSerializer(serializers.Serializer):
    counts = serializers.DictField(
        child=serializers.IntegerField(), help_text="Answers per action id (every action the message offers)."
    )
    results = ResponseRowSerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True)


def _row(response: MessageResponse) -> dict[str, Any]:
    return {
        "user": {"id": str(response.user_id), "username": response.user.get_username()},
        "action": response.action,
        "at": response.at,
    }


class MessageResponsesApi(APIView):
    permission_classes = [IsOperator]
    required_permissions = ("messagecenter.view_message",)
    read_permissions = ("messagecenter.view_message",)

    @extend_schema(
        operation_id="manage_message_responses",
        summary="Answers to a message's actions, newest first, with counts per action",
        parameters=list_parameters()[:2],
        responses={200: ResponsesPageSerializer, **ERRORS(400, 401, 403, 404)},
        examples=[
            OpenApiExample(
                "Answers",
                value={
                    "counts": {"approve": 1, "decline": 0},
                    "results": [
                        {
                            "user": {"id": "7", "username": "alice"},
                            "action": "approve",
                            "at": "2026-11-22T10:00:00+00:00",
                        }
                    ],
                    "next_cursor": None,
                },
                response_only=True,
            )
        ],
    )
    def get(self, request: Request, message_id: int) -> Response:
        message: Message = manage_selectors.message_plain_get(message_id=message_id)
        params = request.query_params
        page = manage_selectors.message_responses_list(
            message=message, limit=parse_limit(params.get("limit")), cursor=params.get("cursor")
        )
        body = {
            "counts": manage_selectors.message_response_counts(message=message),
            "results": [_row(r) for r in page.items],
            "next_cursor": page.next_cursor,
        }
        return Response(ResponsesPageSerializer(body).data)
