from django.urls import URLPattern, path
from rest_framework.permissions import IsAuthenticated

from core import apis, ops_apis

app_name = "core"


def malformed_id_path(prefix: str, suffix: str = "", *, operators_only: bool = True) -> URLPattern:
    """``<prefix><anything else>/<suffix>`` after a resource's id routes: a malformed id is a 400.

    Routes every signed-in user may call (``operators_only=False``) answer the
    400 to any of them; the others only to operators (403 before anything else)."""
    if operators_only:
        return path(f"{prefix}<str:raw>/{suffix}", apis.MalformedIdApi.as_view())
    return path(f"{prefix}<str:raw>/{suffix}", apis.MalformedIdApi.as_view(permission_classes=[IsAuthenticated]))


api_urlpatterns = [
    path("auth/token/", apis.TokenObtainApi.as_view(), name="auth-token"),
    path("me/", apis.MeApi.as_view(), name="me"),
    path("me/tokens/", apis.MyTokensApi.as_view(), name="me-tokens"),
    path("me/tokens/<id:token_id>/", apis.MyTokenApi.as_view(), name="me-token"),
    path("manage/users/<id:user_id>/platforms/", apis.UserPlatformsApi.as_view(), name="user-platforms"),
    path("manage/audit/", apis.AuditListApi.as_view(), name="manage-audit"),
    path("manage/audit/export/", apis.AuditExportApi.as_view(), name="manage-audit-export"),
    path("manage/webhooks/", ops_apis.WebhookListApi.as_view(), name="webhooks"),
    path("manage/webhooks/<id:webhook_id>/", ops_apis.WebhookDetailApi.as_view(), name="webhook"),
    # A path segment that is not an id: 400 (the routes above match only ids).
    malformed_id_path("me/tokens/", operators_only=False),
    malformed_id_path("manage/users/", "platforms/"),
    malformed_id_path("manage/webhooks/"),
]
