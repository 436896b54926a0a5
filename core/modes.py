"""The sync/async plumbing every middleware of ours shares: it runs as its
stack does (WSGI or ASGI) without a thread switch around it.

Kept apart from core.middleware because settings load core.replicas (and so
this module) before the apps are ready: nothing here may import a model."""

from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest
from django.http.response import HttpResponseBase


class BothModesMiddleware:
    """A middleware that runs as its stack does: sync under WSGI, async under
    ASGI (no thread switch around it). A subclass writes the two paths,
    `_call` and `_acall`; the one the stack needs is taken per request."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        return self._call(request)

    def _call(self, request: HttpRequest) -> Any:
        raise NotImplementedError

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        raise NotImplementedError
