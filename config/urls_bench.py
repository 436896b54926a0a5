"""URLs for the bench settings only: the project's URLs plus ``/bench/ping``,
the trivial DRF endpoint the HTTP case compares the inbox endpoint with."""

from django.urls import path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.urls import handler400, handler403, handler404, handler500
from config.urls import urlpatterns as project_urlpatterns

__all__ = ["handler400", "handler403", "handler404", "handler500", "urlpatterns"]


class BenchPingApi(APIView):
    """Does nothing, through the same DRF stack as the API: the project's
    default authentication and permission classes (none overridden here), so
    the inbox endpoint's requests per second are compared with DRF's own floor
    under the same token authentication."""

    def get(self, request: Request) -> Response:
        return Response({"ok": True, "user": request.user.pk})


urlpatterns = [
    *project_urlpatterns,
    path("bench/ping", BenchPingApi.as_view(), name="bench-ping"),
]
