from django.urls import URLPattern, path

from core import apis, ops_apis

app_name = "core"

api_urlpatterns = [
    path("auth/token/", apis.TokenObtainApi.as_view(), name="auth-token"),
    path("me/", apis.MeApi.as_view(), name="me"),
    path("manage/users/<id:user_id>/platforms/", apis.UserPlatformsApi.as_view(), name="user-platforms"),
    path("manage/audit/", apis.AuditListApi.as_view(), name="manage-audit"),
    path("manage/audit/export/", apis.AuditExportApi.as_view(), name="manage-audit-export"),
    path("manage/webhooks/", ops_apis.WebhookListApi.as_view(), name="webhooks"),
    path("manage/webhooks/<id:webhook_id>/", ops_apis.WebhookDetailApi.as_view(), name="webhook"),
]


def malformed_id_path(prefix: str, suffix: str = "") -> URLPattern:
    """``<prefix><anything else>/<suffix>`` after a resource's id routes: a malformed id is a 400."""
    return path(f"{prefix}<str:raw>/{suffix}", apis.MalformedIdApi.as_view())
