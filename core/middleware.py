"""Request-level guards: oversize bodies (413) and a PostgreSQL outage (503).

Oversize bodies: Django enforces DATA_UPLOAD_MAX_MEMORY_SIZE lazily, and DRF turns the
overflow into Django's HTML 400 page; checking Content-Length up front keeps
the answer a JSON error and the body unread.
"""

import logging
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.template.loader import render_to_string

from core.api.errors import error_body, is_unavailable, unavailable_body

logger = logging.getLogger(__name__)


class RequestSizeLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if limit is not None and length > limit and request.path.startswith("/api/"):
            return JsonResponse(error_body("too_large", f"The request body exceeds {limit} bytes."), status=413)
        return self.get_response(request)


def database_unavailable_response(request: HttpRequest) -> HttpResponse:
    """503 with ``Retry-After``: the API's envelope, or a page for people."""
    retry_after = str(int(settings.DATABASE_RETRY_AFTER_SECONDS))
    response: HttpResponse
    if request.path.startswith("/api/") or request.path == "/healthz":
        response = JsonResponse(unavailable_body(), status=503)
    else:
        # No request context: the page must render without the database (no
        # user, no messages, no session lookups).
        response = HttpResponse(render_to_string("503.html", {"retry_after": retry_after}), status=503)
    response["Retry-After"] = retry_after
    return response


class DatabaseUnavailableMiddleware:
    """Turns a PostgreSQL outage raised by any view into the 503 answer.

    Errors raised outside views (another middleware, the session saved on the
    way out) reach ``handler500``, which asks ``is_database_outage`` too; DRF
    views answer through the API's exception handler first."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not is_unavailable(exception):
            return None
        # (Django drops the broken connection when the request finishes.)
        logger.warning("Service unavailable on %s %s: %s", request.method, request.path, exception)
        return database_unavailable_response(request)
