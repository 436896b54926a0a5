"""Page adapters of the core app and the project's error handlers."""

import logging
import sys
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils.translation import gettext
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.views import exception_handler

from core.api.errors import ApplicationError, error_body, is_unavailable, unavailable_body
from core.middleware import database_unavailable_response


@login_required
def home(request: HttpRequest) -> HttpResponse:
    try:
        return redirect(reverse(getattr(settings, "MESSAGECENTER_HOME_URL", "")))
    except NoReverseMatch:
        return render(request, "core/home.html")


def _wants_json(request: HttpRequest) -> bool:
    return request.path.startswith("/api/") or request.path == "/healthz"


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse(error_body("not_found", "Not found."), status=404)
    return render(request, "404.html", status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    # Errors raised outside a view (a middleware, the session saved on the way
    # out) land here; a PostgreSQL outage among them is a 503, not our bug.
    if is_unavailable(sys.exc_info()[1]):
        return database_unavailable_response(request)
    if _wants_json(request):
        return JsonResponse(error_body("server_error", "Something went wrong on our side."), status=500)
    return render(request, "500.html", status=500)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse(error_body("bad_request", "Bad request."), status=400)
    return render(request, "400.html", status=400)


def forbidden(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse(error_body("permission_denied", "Not allowed."), status=403)
    return render(request, "403.html", status=403)


def locked_out(request: HttpRequest, *args: Any) -> HttpResponse:
    """django-axes' lockout answer (``AXES_LOCKOUT_CALLABLE``): 429 with
    ``Retry-After``, the envelope for the API, a page for people."""
    seconds = int(settings.AXES_COOLOFF_TIME.total_seconds())
    response: HttpResponse
    if _wants_json(request):
        response = JsonResponse(error_body("throttled", "Too many failed sign-ins; try again later."), status=429)
    else:
        response = render(request, "registration/locked_out.html", {"minutes": seconds // 60}, status=429)
    response["Retry-After"] = str(seconds)
    return response


# --- the API's exception handler: every API error as the error envelope ---------

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
