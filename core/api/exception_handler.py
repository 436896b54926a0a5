"""Renders every API error as ``{"error": {"code", "message", "fields"?}}``."""

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from django.utils.translation import gettext, gettext_noop
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.views import exception_handler

from core.api.exceptions import ApplicationError, is_unavailable

logger = logging.getLogger(__name__)

_CODES = {
    exceptions.ParseError: "malformed_request",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "throttled",
    exceptions.ValidationError: "invalid",
}


# Messages the domain raises with a fixed text: catalogued here so that the
# handler can answer them in the request's language (LocaleMiddleware picks it
# from the language cookie or Accept-Language; English otherwise). Messages
# built with values inside stay English; DRF's own messages come translated.
TRANSLATED_MESSAGES = (
    gettext_noop("No such item in your inbox."),
    gettext_noop("Announcement not found."),
    gettext_noop("The cursor is not valid."),
    gettext_noop("The cursor belongs to another listing."),
    gettext_noop("limit must be a positive integer."),
    gettext_noop("Unknown category."),
    gettext_noop("Invalid input."),
    gettext_noop("The request body is too large."),
    gettext_noop("The service is briefly unavailable; please retry shortly."),
    gettext_noop("This item has no actions."),
    gettext_noop("You already answered this item."),
)


def error_body(code: str, message: str, fields: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if fields:
        error["fields"] = fields
    return {"error": error}


def unavailable_body() -> dict[str, Any]:
    """The 503 envelope of a PostgreSQL outage (the API's handler and the middleware)."""
    return error_body("service_unavailable", gettext("The service is briefly unavailable; please retry shortly."))


def _first_message(detail: Any) -> str:
    if isinstance(detail, dict):
        for key, value in detail.items():
            inner = _first_message(value)
            return inner if key == "non_field_errors" else f"{key}: {inner}"
    if isinstance(detail, list) and detail:
        return _first_message(detail[0])
    return str(detail)


def _application_response(exc: ApplicationError) -> Response:
    retry_after = getattr(exc, "retry_after", None)
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    # gettext answers the text itself when the catalogue does not hold it.
    message = gettext(exc.message) if exc.message else exc.message
    return Response(error_body(exc.code, message, exc.fields), status=exc.status_code, headers=headers)


def _unavailable_response(exc: Exception) -> Response:
    # PostgreSQL is down or the connection died, or no Redis connection was
    # free in time (an overload): the client may retry, the
    # request was not wrong. (Pages get the same answer from the middleware.)
    logger.warning("Service unavailable (PostgreSQL down or Redis pool exhausted): %s", exc)
    retry_after = str(int(settings.DATABASE_RETRY_AFTER_SECONDS))
    return Response(
        unavailable_body(),
        status=status.HTTP_503_SERVICE_UNAVAILABLE,
        headers={"Retry-After": retry_after},
    )


def _own_response(exc: Exception) -> Response | None:
    """The answer to what the handler renders itself, without DRF's handler."""
    if isinstance(exc, ApplicationError):
        return _application_response(exc)
    if is_unavailable(exc):
        return _unavailable_response(exc)
    if isinstance(exc, RequestDataTooBig):
        return Response(
            error_body("too_large", gettext("The request body is too large.")),
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    return None


def _as_api_exception(exc: Exception) -> Exception:
    """Django's own errors as DRF's, which its handler knows how to answer."""
    if isinstance(exc, DjangoValidationError):
        return exceptions.ValidationError(as_serializer_error(exc))
    if isinstance(exc, Http404):
        return exceptions.NotFound()
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied()
    return exc


def _api_error_body(exc: exceptions.APIException) -> dict[str, Any]:
    code = next((c for cls, c in _CODES.items() if isinstance(exc, cls)), "error")
    if not isinstance(exc, exceptions.ValidationError):
        return error_body(code, _first_message(exc.detail))
    detail = exc.detail
    if isinstance(detail, dict):
        fields = {k: v for k, v in detail.items() if k != "non_field_errors"}
        message = _first_message(detail)
    else:
        fields, message = None, _first_message(detail)
    return error_body(code, message or gettext("Invalid input."), fields)


def envelope_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    own = _own_response(exc)
    if own is not None:
        return own
    exc = _as_api_exception(exc)
    response = exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response
    response.data = _api_error_body(exc)
    return response
