"""Admin for announcements. Writes go through the services, so the read model
and sanitising apply exactly as for the API."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from accounts.platforms import ALL_PLATFORMS
from accounts.selectors import platform_user_counts
from audit.trail import AuditedAdminMixin
from core.api.errors import ApplicationError
from core.api.translations import translations_validate
from core.html import sanitize_html
from insight.reports import rate_chart
from notices import insight, selectors, services
from notices.models import Announcement


class AnnouncementForm(forms.ModelForm):
    platforms = forms.MultipleChoiceField(
        choices=[(p, p.title()) for p in ALL_PLATFORMS], widget=forms.CheckboxSelectMultiple
    )

    class Meta:
        model = Announcement
        fields = ("title", "summary", "body_html", "platforms", "publish_at", "expire_at", "pinned", "translations")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["summary"].help_text = "Leave empty to derive it from the body."
        self.fields["translations"].help_text = (
            'Optional, JSON: {"zh-hans": {"title": "…", "summary": "…", "body_html": "…"}}; '
            "readers of that language see it, a field left out shows the original."
        )
        if self.instance.pk:
            self.fields["platforms"].initial = self.instance.platforms
            # Translations are given with the create (as the API takes them).
            self.fields["translations"].disabled = True

    def clean_translations(self) -> dict[str, Any]:
        try:
            return translations_validate(self.cleaned_data.get("translations") or {})
        except ApplicationError as exc:
            raise forms.ValidationError(exc.message) from exc

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        publish_at, expire_at = cleaned.get("publish_at"), cleaned.get("expire_at")
        if publish_at and expire_at and expire_at <= publish_at:
            self.add_error("expire_at", "Must be after the publish time.")
        return cleaned


@admin.register(Announcement)
class AnnouncementAdmin(AuditedAdminMixin, admin.ModelAdmin):
    form = AnnouncementForm
    list_display = ("title", "platform_list", "status", "pinned", "read_ratio", "publish_at", "expire_at")
    list_filter = ("pinned", "platform_rows__platform")
    search_fields = ("title",)
    date_hierarchy = "publish_at"
    readonly_fields = ("preview", "read_statistics", "author", "created_at", "updated_at")
    actions = ("publish_now", "unpublish")
    fieldsets = (
        (None, {"fields": ("title", "summary", "body_html", "platforms", "pinned")}),
        ("Translations", {"fields": ("translations",)}),
        ("Schedule", {"fields": ("publish_at", "expire_at")}),
        ("Preview and statistics", {"fields": ("preview", "read_statistics", "author", "created_at", "updated_at")}),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Announcement]:
        return super().get_queryset(request).prefetch_related("platform_rows")

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        # One user count per page for the read-ratio column, not one per row.
        self._user_counts = platform_user_counts()
        return super().changelist_view(request, extra_context)

    @admin.display(description="Platforms")
    def platform_list(self, obj: Announcement) -> str:
        return ", ".join(obj.platforms)

    @admin.display(description="Status")
    def status(self, obj: Announcement) -> str:
        return obj.status_at(timezone.now())

    @admin.display(description="Read")
    def read_ratio(self, obj: Announcement) -> str:
        counts = getattr(self, "_user_counts", None) or platform_user_counts()
        ratio = selectors.announcement_read_ratio(announcement=obj, user_counts=counts)
        return "-" if ratio is None else f"{ratio:.0%}"

    @admin.display(description="Preview")
    def preview(self, obj: Announcement) -> SafeString:
        if not obj.pk:
            return format_html("<p>{}</p>", "Save to preview.")
        body = mark_safe(sanitize_html(obj.body_html))  # noqa: S308  (nh3-sanitised)
        return format_html('<div class="prose"><h2>{}</h2><p><em>{}</em></p>{}</div>', obj.title, obj.summary, body)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.insight_view)
        return [path("<id:announcement_id>/insight/", view, name="notices_announcement_insight"), *super().get_urls()]

    def insight_view(self, request: HttpRequest, announcement_id: int) -> HttpResponse:
        """Read counts per platform, the read rate over time and who has not read it yet."""
        announcement = self.get_object(request, str(announcement_id))
        if announcement is None or not self.has_view_permission(request, announcement):
            raise Http404("No such announcement.")
        platforms = announcement.platforms
        platform = request.GET.get("platform") or (platforms[0] if platforms else "")
        after = request.GET.get("after") or "0"
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "original": announcement,
            "title": f"Reading of “{announcement.title}”",
            "platforms": platforms,
            "platform": platform,
        }
        try:
            stats = selectors.announcement_stats(announcement=announcement)
            timeline = insight.announcement_read_timeline(announcement=announcement)
            page = insight.announcement_non_readers(
                announcement=announcement, platform=platform, after_id=int(after) if after.isdigit() else 0
            )
        except ApplicationError as exc:
            context["unavailable"] = exc.message
            return TemplateResponse(request, "admin/notices/announcement/insight.html", context)
        reachable = sum(row["users"] for row in stats["by_platform"].values())
        context.update(
            stats=stats,
            timeline=timeline,
            chart=rate_chart(timeline, reachable),
            page=page,
            reminder_usernames="\n".join(name for _, name in page.users),
            compose_url=reverse("admin:messagecenter_message_add"),
        )
        return TemplateResponse(request, "admin/notices/announcement/insight.html", context)

    @admin.display(description="Read statistics")
    def read_statistics(self, obj: Announcement) -> SafeString:
        if not obj.pk:
            return format_html("{}", "-")
        try:
            stats = selectors.announcement_stats(announcement=obj)
        except ApplicationError as exc:
            return format_html("<p>{}</p>", exc.message)
        rows = format_html_join(
            "",
            "<tr><th scope='row'>{}</th><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (platform, row["read"], row["users"], f"{row['ratio']:.1%}")
                for platform, row in stats["by_platform"].items()
            ),
        )
        return format_html(
            "<table><thead><tr><th scope='col'>Platform</th><th scope='col'>Read</th><th scope='col'>Users</th>"
            "<th scope='col'>Ratio</th></tr></thead><tbody>{}</tbody></table><p>Read in total: {}</p>"
            '<p><a href="{}">Read rate over time and who has not read it</a></p>',
            rows,
            stats["read_total"],
            reverse("admin:notices_announcement_insight", args=[obj.pk]),
        )

    def save_model(self, request: HttpRequest, obj: Announcement, form: Any, change: bool) -> None:
        data = form.cleaned_data
        fields = {name: data[name] for name in AnnouncementForm.Meta.fields if name in data}
        try:
            if change:
                fields.pop("translations", None)  # set with the create only
                saved = services.announcement_update(announcement=obj, **fields)
            else:
                saved = services.announcement_create(author=request.user, **fields)
        except ApplicationError as exc:
            # Form validation mirrors the services; this only catches races.
            self.message_user(request, exc.message, level=messages.ERROR)
            raise
        obj.pk = saved.pk
        obj.__dict__.update({k: v for k, v in saved.__dict__.items() if not k.startswith("_")})

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        # Platforms were written by the service; there are no other relations to save.
        return None

    def delete_model(self, request: HttpRequest, obj: Announcement) -> None:
        services.announcement_delete(announcement=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Announcement]) -> None:
        for announcement in queryset:
            services.announcement_delete(announcement=announcement)

    @admin.action(description="Publish now", permissions=["change"])
    def publish_now(self, request: HttpRequest, queryset: QuerySet[Announcement]) -> None:
        for announcement in queryset:
            services.announcement_publish_now(announcement=announcement)
        self.message_user(request, f"Published {queryset.count()} announcement(s).", level=messages.SUCCESS)

    @admin.action(description="Unpublish (expire now)", permissions=["change"])
    def unpublish(self, request: HttpRequest, queryset: QuerySet[Announcement]) -> None:
        for announcement in queryset:
            services.announcement_unpublish(announcement=announcement)
        self.message_user(request, f"Unpublished {queryset.count()} announcement(s).", level=messages.SUCCESS)
