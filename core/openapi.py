"""Schema helpers: the error envelope, declared on every operation that can answer it."""

from drf_spectacular.openapi import AutoSchema as _AutoSchema
from drf_spectacular.utils import Direction, OpenApiResponse, inline_serializer
from rest_framework import serializers

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
}


def ERRORS(*codes: int) -> dict[int, OpenApiResponse]:
    """``responses={200: X, **ERRORS(400, 404)}``; 429 is always included."""
    wanted = set(codes) | {429}
    return {code: OpenApiResponse(ErrorEnvelope, description=_DESCRIPTIONS[code]) for code in sorted(wanted)}


class AutoSchema(_AutoSchema):
    """Names nested serializers after their API class.

    ``UserPlatformsApi.InputSerializer`` becomes the component
    ``UserPlatformsApiInput``, so every API class can keep its own nested
    ``InputSerializer``/``OutputSerializer`` without component clashes.
    """

    def get_serializer_name(self, serializer: serializers.Serializer, direction: Direction) -> str:
        qualname = type(serializer).__qualname__
        if "." in qualname and "<locals>" not in qualname:
            return qualname.replace(".", "")
        return super().get_serializer_name(serializer, direction)
