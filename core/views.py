"""Page adapters of the core app and the project's error handlers."""

import sys
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse

from core.api.exception_handler import error_body
from core.api.exceptions import is_unavailable
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
