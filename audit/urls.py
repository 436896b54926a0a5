"""The audit app's API routes (under /api/v1/, config/urls.py)."""

from django.urls import path

from audit import apis

api_urlpatterns = [
    path("manage/audit/", apis.AuditListApi.as_view(), name="manage-audit"),
    path("manage/audit/export/", apis.AuditExportApi.as_view(), name="manage-audit-export"),
]
