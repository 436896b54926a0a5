"""Refuses oversize request bodies with the API's 413 envelope.

Django enforces DATA_UPLOAD_MAX_MEMORY_SIZE lazily, and DRF turns the
overflow into Django's HTML 400 page; checking Content-Length up front keeps
the answer a JSON error and the body unread.
"""

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from core.api.exception_handler import error_body


class RequestSizeLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if limit is not None and length > limit and request.path.startswith("/api/"):
            return JsonResponse(error_body("too_large", f"The request body exceeds {limit} bytes."), status=413)
        return self.get_response(request)
