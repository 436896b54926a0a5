"""The Redis check runs in the admin (drift found and repaired)."""

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from kombu.exceptions import OperationalError as KombuOperationalError

from audit.trail import AuditedAdminMixin, audit_admin, object_type_of
from durability.models import RedisCheckRun
from durability.tasks import check_redis_task

RUN_PERMISSION = "durability.add_redischeckrun"


@admin.register(RedisCheckRun)
class RedisCheckRunAdmin(AuditedAdminMixin, admin.ModelAdmin):
    """Runs are records: read-only. "Run check now" (POST, CSRF) needs the model's
    ``add`` permission, which holding it never turns into an add form here; queuing
    it is audited (a repair rewrites the read model)."""

    change_list_template = "admin/durability/redischeckrun/change_list.html"
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
        return [path("run/", view, name="durability_redischeckrun_run"), *super().get_urls()]

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
            # The entry commits only if the check was queued: a broker that
            # refuses it rolls the entry back with the error shown.
            with transaction.atomic():
                run_type = object_type_of(RedisCheckRun)
                audit_admin(request, action="check_redis", object_type=run_type, changes={"repair": repair})
                check_redis_task.delay(repair=repair)
        except KombuOperationalError as exc:
            self.message_user(request, f"Could not queue the check: {exc}", messages.ERROR)
        else:
            what = "Check with repair" if repair else "Check"
            self.message_user(request, f"{what} queued: its run appears in this list when it ends.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:durability_redischeckrun_changelist"))
