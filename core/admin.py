from typing import Any

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from kombu.exceptions import OperationalError as KombuOperationalError

from core.audit import AuditedAdminMixin, audit_csv
from core.models import AuditEntry, RedisCheckRun, UserPlatform
from core.tasks import check_redis_task


class UserPlatformInline(admin.TabularInline):
    model = UserPlatform
    extra = 0
    min_num = 1
    verbose_name = "platform"


User = get_user_model()
admin.site.unregister(User)


@admin.register(User)
class PlatformUserAdmin(AuditedAdminMixin, UserAdmin):
    inlines = [UserPlatformInline]
    list_filter = (*UserAdmin.list_filter, "platform_memberships__platform")

    def get_inlines(self, request, obj):  # type: ignore[no-untyped-def]
        # New users get their default platform from a signal; edit it afterwards.
        return self.inlines if obj is not None else []


# --- Redis read model checks (check_redis) ------------------------------------------

RUN_PERMISSION = "core.add_redischeckrun"


@admin.register(RedisCheckRun)
class RedisCheckRunAdmin(admin.ModelAdmin):
    """Runs are records: read-only. "Run check now" (POST, CSRF) needs the model's
    ``add`` permission, which holding it never turns into an add form here."""

    change_list_template = "admin/core/redischeckrun/change_list.html"
    list_display = ("started_at", "repair", "drift_count", "repaired_count", "error_summary")
    list_filter = ("repair",)
    date_hierarchy = "started_at"
    fields = ("started_at", "finished_at", "repair", "drift_count", "repaired_count", "error", "findings_table")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: RedisCheckRun | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: RedisCheckRun | None = None) -> bool:
        return False

    @admin.display(description="error")
    def error_summary(self, obj: RedisCheckRun) -> str:
        return obj.error[:80]

    @admin.display(description="findings")
    def findings_table(self, obj: RedisCheckRun) -> str:
        if not obj.findings:
            return "none"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td><code>{}</code></td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
            (
                (
                    f.get("area", ""),
                    f.get("key", ""),
                    f.get("member", ""),
                    f.get("detail", ""),
                    "repaired" if f.get("repaired") else "",
                )
                for f in obj.findings
            ),
        )
        shown = len(obj.findings)
        note = f"first {shown} of {obj.drift_count}" if obj.drift_count > shown else f"{shown}"
        return format_html(
            '<p>{} finding(s)</p><table class="redis-check-findings"><thead><tr><th>area</th><th>key</th>'
            "<th>member</th><th>detail</th><th>status</th></tr></thead><tbody>{}</tbody></table>",
            note,
            rows,
        )

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.run_view)
        return [path("run/", view, name="core_redischeckrun_run"), *super().get_urls()]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        context = {"can_run_check": request.user.has_perm(RUN_PERMISSION), **(extra_context or {})}
        return super().changelist_view(request, extra_context=context)

    def run_view(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not request.user.has_perm(RUN_PERMISSION):
            raise PermissionDenied
        repair = request.POST.get("repair") == "1"
        try:
            check_redis_task.delay(repair=repair)
        except KombuOperationalError as exc:
            self.message_user(request, f"Could not queue the check: {exc}", messages.ERROR)
        else:
            what = "Check with repair" if repair else "Check"
            self.message_user(request, f"{what} queued: its run appears in this list when it ends.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:core_redischeckrun_changelist"))


# --- the audit log ---------------------------------------------------------------------


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
