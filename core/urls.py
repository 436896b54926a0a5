from django.urls import URLPattern, path
from rest_framework.permissions import IsAuthenticated

from core import apis

app_name = "core"


def malformed_id_path(prefix: str, suffix: str = "", *, operators_only: bool = True) -> URLPattern:
    """``<prefix><anything else>/<suffix>`` after a resource's id routes: a malformed id is a 400.

    Routes every signed-in user may call (``operators_only=False``) answer the
    400 to any of them; the others only to operators (403 before anything else)."""
    if operators_only:
        return path(f"{prefix}<str:raw>/{suffix}", apis.MalformedIdApi.as_view())
    return path(f"{prefix}<str:raw>/{suffix}", apis.MalformedIdApi.as_view(permission_classes=[IsAuthenticated]))
