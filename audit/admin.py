"""The audit log in the admin (read only)."""

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from audit.models import AuditEntry
from audit.trail import audit_csv


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    """The audit log is a record: viewable and exportable, never edited here."""

    list_display = ("at", "actor_name", "action", "object_type", "object_id", "object_repr", "source", "ip")
    list_filter = ("action", "object_type", "source", "at")
    search_fields = ("actor_name", "object_id", "object_repr")
    date_hierarchy = "at"
    fields = (
        "at",
        "actor",
        "actor_name",
        "action",
        "object_type",
        "object_id",
        "object_repr",
        "changes",
        "source",
        "path",
        "ip",
    )
    readonly_fields = fields
    actions = ("export_csv",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AuditEntry | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AuditEntry | None = None) -> bool:
        return False

    @admin.action(description="Export selected entries as CSV", permissions=["view"])
    def export_csv(self, request: HttpRequest, queryset: QuerySet[AuditEntry]) -> HttpResponse:
        response = HttpResponse(audit_csv(queryset.order_by("-at", "-id")), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="audit.csv"'
        return response
