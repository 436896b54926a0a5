"""Request-level guards: oversize bodies (413) and a PostgreSQL outage (503).

Oversize bodies: Django enforces DATA_UPLOAD_MAX_MEMORY_SIZE lazily, and DRF turns the
overflow into Django's HTML 400 page; checking Content-Length up front keeps
the answer a JSON error and the body unread.
"""

import logging
from typing import Any

from asgiref.sync import iscoroutinefunction, sync_to_async
from csp import middleware as csp_middleware
from django.conf import settings
from django.contrib.auth import middleware as auth
from django.contrib.messages import middleware as messages
from django.contrib.sessions import middleware as sessions
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.middleware import clickjacking, common, csrf, locale, security
from django.template.loader import render_to_string
from whitenoise import middleware as whitenoise_middleware

from core.api.exception_handler import error_body, unavailable_body
from core.exceptions import is_unavailable
from core.modes import BothModesMiddleware

logger = logging.getLogger(__name__)


class _BothModes(BothModesMiddleware):
    """A middleware that may answer early (`before`), the same in both modes."""

    def __call__(self, request: HttpRequest) -> Any:
        early = self.before(request)
        if self.is_async:
            return self._aanswer(request, early)
        return early or self.get_response(request)

    async def _aanswer(self, request: HttpRequest, early: HttpResponseBase | None) -> HttpResponseBase:
        if early is not None:
            return early
        response: HttpResponseBase = await self.get_response(request)
        return response

    def before(self, request: HttpRequest) -> HttpResponseBase | None:
        return None


class RequestSizeLimitMiddleware(_BothModes):
    def before(self, request: HttpRequest) -> HttpResponseBase | None:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if limit is not None and length > limit and request.path.startswith("/api/"):
            return JsonResponse(error_body("too_large", f"The request body exceeds {limit} bytes."), status=413)
        return None


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


class DatabaseUnavailableMiddleware(_BothModes):
    """Turns a PostgreSQL outage raised by any view into the 503 answer.

    Errors raised outside views (another middleware, the session saved on the
    way out) reach ``handler500``, which asks ``is_database_outage`` too; DRF
    views answer through the API's exception handler first."""

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not is_unavailable(exception):
            return None
        # (Django drops the broken connection when the request finishes.)
        logger.warning("Service unavailable on %s %s: %s", request.method, request.path, exception)
        return database_unavailable_response(request)


# --- One async stack under ASGI ----------------------------------------------------------
#
# Under an ASGI server Django runs a middleware that cannot run async behind a
# switch to a worker thread and back, and Django's own ``MiddlewareMixin``
# runs every ``process_request``/``process_response`` through
# ``sync_to_async`` (a thread switch each, all on one shared thread per
# process). With the stack below that made ~20 switches per request, and the
# one thread the bottleneck of the whole process. The classes here run the
# same hooks inline on the event loop: they only read and write the request
# and the response (headers, cookies, a lazy user). The one hook that may
# reach the database (the session saved on the way out, messages stored in
# it) still takes the thread, only when it has something to save.


class InlineHooksMixin:
    """A ``MiddlewareMixin`` subclass whose hooks run inline under ASGI (see above)."""

    get_response: Any

    def __init__(self, get_response: Any) -> None:
        super().__init__(get_response)  # type: ignore[call-arg]
        sync_view = getattr(self, "process_view", None)
        if iscoroutinefunction(get_response) and sync_view is not None:
            # Django adapts a sync process_view with sync_to_async in an async
            # stack: hand it a coroutine that runs the same check inline.
            async def process_view(*args: Any) -> HttpResponseBase | None:
                return sync_view(*args)

            setattr(self, "process_view", process_view)  # noqa: B010 (an instance attribute over the method)

    def response_needs_thread(self, request: HttpRequest) -> bool:
        return False

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        hooks: Any = self
        response = hooks.process_request(request) if hasattr(hooks, "process_request") else None
        response = response or await self.get_response(request)
        if hasattr(hooks, "process_response"):
            if self.response_needs_thread(request):
                return await sync_to_async(hooks.process_response, thread_sensitive=True)(request, response)
            return hooks.process_response(request, response)
        return response


class SecurityMiddleware(InlineHooksMixin, security.SecurityMiddleware):
    pass


class SessionMiddleware(InlineHooksMixin, sessions.SessionMiddleware):
    def response_needs_thread(self, request: HttpRequest) -> bool:
        session = getattr(request, "session", None)
        return bool(session is not None and session.accessed)


class LocaleMiddleware(InlineHooksMixin, locale.LocaleMiddleware):
    pass


class CommonMiddleware(InlineHooksMixin, common.CommonMiddleware):
    pass


class CsrfViewMiddleware(InlineHooksMixin, csrf.CsrfViewMiddleware):
    def response_needs_thread(self, request: HttpRequest) -> bool:
        return bool(settings.CSRF_USE_SESSIONS)


class AuthenticationMiddleware(InlineHooksMixin, auth.AuthenticationMiddleware):
    pass


class MessageMiddleware(InlineHooksMixin, messages.MessageMiddleware):
    def response_needs_thread(self, request: HttpRequest) -> bool:
        storage = getattr(request, "_messages", None)
        return bool(storage is not None and (storage.used or storage.added_new))


class XFrameOptionsMiddleware(InlineHooksMixin, clickjacking.XFrameOptionsMiddleware):
    pass


class CSPMiddleware(InlineHooksMixin, csp_middleware.CSPMiddleware):
    pass


class WhiteNoiseMiddleware(BothModesMiddleware, whitenoise_middleware.WhiteNoiseMiddleware):
    """WhiteNoise, async under ASGI: a request that is no static file passes
    through on the event loop (a dict lookup); serving a file, or looking for
    one on disk (autorefresh), takes a thread."""

    def __init__(self, get_response: Any) -> None:
        whitenoise_middleware.WhiteNoiseMiddleware.__init__(self, get_response)
        BothModesMiddleware.__init__(self, get_response)

    def _call(self, request: HttpRequest) -> Any:
        return whitenoise_middleware.WhiteNoiseMiddleware.__call__(self, request)

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        if self.autorefresh:
            static_file = await sync_to_async(self.find_file)(request.path_info)
        else:
            static_file = self.files.get(request.path_info)
        if static_file is not None:
            return await sync_to_async(self.serve)(static_file, request)
        response: HttpResponseBase = await self.get_response(request)
        return response
