from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.i18n import JavaScriptCatalog
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView

import accounts.urls
import audit.urls
import messagecenter.urls
import notices.urls
import webhooks.urls
from core import views as core_views
from durability.apis import HealthApi
from insight import views as activity_views
from insight.apis import MetricsApi

api_v1 = [
    *audit.urls.api_urlpatterns,
    *accounts.urls.api_urlpatterns,
    *webhooks.urls.api_urlpatterns,
    *notices.urls.api_urlpatterns,
    *messagecenter.urls.api_urlpatterns,
]

urlpatterns = [
    path("", core_views.home, name="home"),
    # Staff only (the admin's own login and is_staff check).
    path("admin/activity/", admin.site.admin_view(activity_views.activity_dashboard), name="admin-activity"),
    path("admin/activity.csv", admin.site.admin_view(activity_views.activity_csv), name="admin-activity-csv"),
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", HealthApi.as_view(), name="healthz"),
    path("metrics", MetricsApi.as_view(), name="metrics"),
    # The language switcher posts here (sets the language cookie).
    path("i18n/", include("django.conf.urls.i18n")),
    # The pages' scripts translate through this catalogue (gettext, ngettext, interpolate).
    path("jsi18n/", JavaScriptCatalog.as_view(), name="javascript-catalog"),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves its start-up script as a file: no inline script (CSP).
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="api-redoc"),
    # django-notifications-hq's pages and live endpoints, at the path its sites
    # mount them (old links keep working); before the inbox's pages, whose
    # inbox/<item_id>/ would take it.
    path("inbox/notifications/", include("notifications.urls", namespace="notifications")),
    path("", include((notices.urls.page_urlpatterns, "notices"))),
    path("", include((messagecenter.urls.page_urlpatterns, "messagecenter"))),
]

handler400 = "core.views.bad_request"
handler403 = "core.views.forbidden"
handler404 = "core.views.not_found"
handler500 = "core.views.server_error"

admin.site.site_header = "Message centre administration"
admin.site.site_title = "Message centre"
