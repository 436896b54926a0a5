from django.urls import path

from core import apis, ops_apis

app_name = "core"

api_urlpatterns = [
    path("auth/token/", apis.TokenObtainApi.as_view(), name="auth-token"),
    path("me/", apis.MeApi.as_view(), name="me"),
    path("manage/users/<id:user_id>/platforms/", apis.UserPlatformsApi.as_view(), name="user-platforms"),
    path("manage/webhooks/", ops_apis.WebhookListApi.as_view(), name="webhooks"),
    path("manage/webhooks/<id:webhook_id>/", ops_apis.WebhookDetailApi.as_view(), name="webhook"),
]
