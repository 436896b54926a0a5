"""Schema helpers: the error envelope, declared on every operation that can
answer it, and the schemas of the shared request fields and parameters (so
the document states each bound the code enforces)."""

from typing import Any

from django.conf import settings
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.openapi import AutoSchema as _AutoSchema
from drf_spectacular.plumbing import ComponentRegistry, build_basic_type
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import Direction, OpenApiExample, OpenApiParameter, OpenApiResponse, inline_serializer
from rest_framework import serializers

from core.api.fields import EARLIEST_TIME, ID_PATTERN, LATEST_TIME

ErrorDetail = inline_serializer(
    "ErrorDetail",
    {
        "code": serializers.CharField(),
        "message": serializers.CharField(),
        "fields": serializers.DictField(required=False),
    },
)
ErrorEnvelope = inline_serializer("Error", {"error": ErrorDetail})

_DESCRIPTIONS = {
    400: "Bad input",
    401: "No credentials",
    403: "Not allowed",
    404: "Absent, or not addressed to you",
    409: "Conflict",
    413: "Body too large",
    429: "Throttled",
    503: "Briefly unavailable (the database cannot be reached); retry after `Retry-After` seconds",
}


def ERRORS(*codes: int) -> dict[int, OpenApiResponse]:
    """``responses={200: X, **ERRORS(400, 404)}``; 429 is always included."""
    wanted = set(codes) | {429}
    return {code: OpenApiResponse(ErrorEnvelope, description=_DESCRIPTIONS[code]) for code in sorted(wanted)}


def limit_parameter() -> OpenApiParameter:
    page, cap = int(settings.MESSAGECENTER_PAGE_SIZE), int(settings.MESSAGECENTER_MAX_PAGE_SIZE)
    return OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1},
        description=f"Page size, default {page}. A larger value than {cap} is capped at {cap}; "
        "zero, negative or non-numeric is 400.",
    )


def cursor_parameter() -> OpenApiParameter:
    return OpenApiParameter("cursor", OpenApiTypes.STR, description="`next_cursor` of the previous page (opaque).")


def time_parameter(name: str, description: str) -> OpenApiParameter:
    return OpenApiParameter(
        name,
        OpenApiTypes.DATETIME,
        description=f"{description} ISO 8601 (without an offset: UTC), from {EARLIEST_TIME.date()} "
        f"up to {LATEST_TIME.date()}.",
    )


class IdFieldExtension(OpenApiSerializerFieldExtension):
    target_class = "core.api.fields.IdField"

    def map_serializer_field(self, auto_schema: Any, direction: Direction) -> Any:
        return {
            "oneOf": [
                {"type": "string", "pattern": f"^{ID_PATTERN}$"},
                {"type": "integer", "minimum": 1, "maximum": self.target.max_value},
            ],
            "description": f"An id as the API returned it (a string of digits) or a JSON integer; "
            f"at most {self.target.max_value}.",
        }


class RefFieldExtension(OpenApiSerializerFieldExtension):
    target_class = "core.api.fields.RefField"

    def map_serializer_field(self, auto_schema: Any, direction: Direction) -> Any:
        return {
            "oneOf": [
                {"type": "string", "pattern": f"^[a-z]{ID_PATTERN}$"},
                {"type": "integer", "minimum": 1},
            ],
            "description": 'An item id as the API returned it (e.g. "m12"), or a JSON integer.',
        }


class TimeFieldExtension(OpenApiSerializerFieldExtension):
    target_class = "core.api.fields.TimeField"

    def map_serializer_field(self, auto_schema: Any, direction: Direction) -> Any:
        schema: dict[str, Any] = dict(build_basic_type(OpenApiTypes.DATETIME) or {})
        if direction == "request":
            schema["description"] = (
                f"ISO 8601 (without an offset: UTC), from {EARLIEST_TIME.date()} up to {LATEST_TIME.date()}."
            )
        return schema


class AutoSchema(_AutoSchema):
    """Names nested serializers after their API class.

    ``UserPlatformsApi.InputSerializer`` becomes the component
    ``UserPlatformsApiInput``, so every API class can keep its own nested
    ``InputSerializer``/``OutputSerializer`` without component clashes.
    """

    def get_operation(
        self, path: str, path_regex: str, path_prefix: str, method: str, registry: ComponentRegistry
    ) -> dict[str, Any] | None:
        operation: dict[str, Any] | None = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is not None:
            self.state_errors(operation.setdefault("responses", {}), method=method, path_regex=path_regex)
        return operation

    def state_errors(self, responses: dict[str, Any], *, method: str, path_regex: str) -> None:
        """Stated centrally: any operation can meet a PostgreSQL outage (503), any
        body can be too large (413), and exactly the throttled ones answer 429."""
        throttled = bool(self.view.get_throttles())
        if throttled and "429" not in responses:
            responses["429"] = self.error_response(_DESCRIPTIONS[429])
        elif not throttled:
            responses.pop("429", None)
        if method != "GET" and "413" not in responses:
            # core.middleware.RequestSizeLimitMiddleware refuses any oversize API body.
            responses["413"] = self.error_response(_DESCRIPTIONS[413])
        if "400" not in responses and "<id:" in (path_regex or ""):
            # core.urls.MalformedIdApi: a malformed id in the path is a 400 whatever the method.
            responses["400"] = self.error_response("Bad input (a malformed id in the path)")
        if "503" not in responses:
            responses["503"] = self.error_response(_DESCRIPTIONS[503])
        for code in ("429", "503"):
            if code in responses:
                responses[code].setdefault("headers", {})["Retry-After"] = {
                    "schema": {"type": "integer", "minimum": 0},
                    "description": "Seconds to wait before retrying.",
                }

    def error_response(self, description: str) -> dict[str, Any]:
        """The error envelope as a response, in each media type the view renders."""
        component = self.resolve_serializer(ErrorEnvelope, "response")
        schema = {"schema": component.ref}
        return {
            "content": {media: dict(schema) for media in self.map_renderers("media_type")},
            "description": description,
        }

    def get_serializer_name(self, serializer: serializers.Serializer, direction: Direction) -> str:
        qualname = type(serializer).__qualname__
        if "." in qualname and "<locals>" not in qualname:
            return qualname.replace(".", "")
        return super().get_serializer_name(serializer, direction)


def page_serializer(name: str, item: type[serializers.Serializer]) -> Any:
    """``{"results": [item], "next_cursor"}``: the shape of every paged list."""
    return inline_serializer(name, {"results": item(many=True), "next_cursor": serializers.CharField(allow_null=True)})


def filter_parameter(
    name: str, description: str, *, kind: Any = OpenApiTypes.STR, enum: list[str] | None = None
) -> OpenApiParameter:
    return OpenApiParameter(name, kind, enum=enum, description=description)


def id_filter_parameter(name: str, description: str) -> OpenApiParameter:
    return OpenApiParameter(
        name,
        {"type": "string", "pattern": f"^{ID_PATTERN}$"},
        description=f"{description} An id as the API returns it; a malformed one is 400.",
    )


def list_parameters(*extra: OpenApiParameter) -> list[OpenApiParameter]:
    """``limit``, ``cursor`` and ``since`` (every operators' list has them), then the list's own filters."""
    return [
        limit_parameter(),
        cursor_parameter(),
        time_parameter("since", "Only rows created after this time."),
        *extra,
    ]


def example(name: str, value: Any, *, status_code: int = 200, summary: str = "") -> OpenApiExample:
    return OpenApiExample(name, value=value, response_only=True, status_codes=[str(status_code)], summary=summary)
