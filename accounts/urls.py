"""The accounts app's API routes (under /api/v1/, config/urls.py)."""

from django.urls import path

from accounts import apis
from core.urls import malformed_id_path

api_urlpatterns = [
    path("auth/token/", apis.TokenObtainApi.as_view(), name="auth-token"),
    path("me/", apis.MeApi.as_view(), name="me"),
    path("me/tokens/", apis.MyTokensApi.as_view(), name="me-tokens"),
    path("me/tokens/<id:token_id>/", apis.MyTokenApi.as_view(), name="me-token"),
    path("manage/users/<id:user_id>/platforms/", apis.UserPlatformsApi.as_view(), name="user-platforms"),
    # A path segment that is not an id: 400 (the routes above match only ids).
    malformed_id_path("me/tokens/", operators_only=False),
    malformed_id_path("manage/users/", "platforms/"),
]
