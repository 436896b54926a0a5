"""The webhooks app's API routes (under /api/v1/, config/urls.py)."""

from django.urls import path

from core.urls import malformed_id_path
from webhooks import apis

api_urlpatterns = [
    path("manage/webhooks/", apis.WebhookListApi.as_view(), name="webhooks"),
    path("manage/webhooks/<id:webhook_id>/", apis.WebhookDetailApi.as_view(), name="webhook"),
    malformed_id_path("manage/webhooks/"),
]
