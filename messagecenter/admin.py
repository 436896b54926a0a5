"""Django admin for operators. Writes go through the services; the admin only
adapts forms to them."""

import csv
import itertools
import re
import uuid
from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count, Q, QuerySet
from django.forms import ModelForm
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from audit.trail import AuditedAdminMixin, audit_admin
from core.api.errors import ApplicationError
from core.html import sanitize_html
from insight.reports import bar_chart, rate_chart
from messagecenter import insight, manage_selectors, selectors, services
from messagecenter.forms import BulletinForm, MessageComposeForm, NotificationRuleForm, UserGroupForm
from messagecenter.models import (
    Bulletin,
    Message,
    MessageStatus,
    MessageType,
    Notification,
    NotificationRule,
    PendingDelivery,
    RuleRun,
    StockLevel,
    Subscription,
    UserGroup,
    UserGroupMembership,
)
from messagecenter.services.reminders import reminder_title


class MembershipInline(admin.TabularInline):
    """Read-only list of members; changes go through the add/remove fields."""

    model = UserGroupMembership
    fields = ["user", "created_at"]
    readonly_fields = ["user", "created_at"]
    extra = 0
    can_delete = False
    max_num = 0
    show_change_link = False


@admin.register(UserGroup)
class UserGroupAdmin(AuditedAdminMixin, admin.ModelAdmin):
    form = UserGroupForm
    list_display = ["name", "member_count", "created_at"]
    search_fields = ["name"]
    ordering = ["name"]  # stable pages for the list and the recipients autocomplete
    inlines = [MembershipInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[UserGroup]:
        return super().get_queryset(request).annotate(n_members=Count("memberships"))

    @admin.display(description="Members", ordering="n_members")
    def member_count(self, obj: UserGroup) -> int:
        return int(getattr(obj, "n_members", 0))

    def save_model(self, request: HttpRequest, obj: UserGroup, form: ModelForm, change: bool) -> None:
        if change:
            obj.save()
        else:
            created = services.user_group_create(name=obj.name)
            obj.pk = created.pk
            obj.created_at = created.created_at

    def save_related(self, request: HttpRequest, form: ModelForm, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)  # read-only inline: saves nothing
        group = form.instance
        added = services.user_group_add_members(group=group, user_ids=form.cleaned_data.get("add_members") or [])
        removed = services.user_group_remove_members(
            group=group, user_ids=form.cleaned_data.get("remove_members") or []
        )
        if added or removed:
            self.message_user(request, f"{added} member(s) added, {removed} removed.")

    def delete_model(self, request: HttpRequest, obj: UserGroup) -> None:
        services.user_group_delete(group=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[UserGroup]) -> None:
        for group in queryset:
            services.user_group_delete(group=group)


# The key a reminder confirmation carries (admin-remind-<ref>-<uuid4 hex>).
_REMIND_KEY = re.compile(r"admin-remind-[mb][0-9]+-[0-9a-f]{32}")


def _can_remind(request: HttpRequest) -> bool:
    """A reminder is a message: sending one takes the permission to send messages."""
    return bool(request.user.has_perm("messagecenter.add_message"))


class ReadInsightAdmin(AuditedAdminMixin, admin.ModelAdmin):
    """Read statistics of an inbox item (message, bulletin): a block on the change
    page and a linked page with the read rate over time (as for announcements)."""

    def read_stats(self, obj: Any) -> insight.ItemReadStats:
        raise NotImplementedError

    def _insight_url_name(self) -> str:
        return f"{self.model._meta.app_label}_{self.model._meta.model_name}_insight"

    def get_urls(self) -> list[URLPattern]:
        name = self._insight_url_name()
        wrap = self.admin_site.admin_view
        return [
            path("<id:object_id>/insight/", wrap(self.insight_view), name=name),
            path("<id:object_id>/insight/unread.csv", wrap(self.unread_csv_view), name=f"{name}_unread_csv"),
            path("<id:object_id>/insight/readers.csv", wrap(self.readers_csv_view), name=f"{name}_readers_csv"),
            path("<id:object_id>/insight/remind/", wrap(self.remind_view), name=f"{name}_remind"),
            *super().get_urls(),
        ]

    def _viewable(self, request: HttpRequest, object_id: int) -> Any:
        obj = self.get_object(request, str(object_id))
        if obj is None or not self.has_view_permission(request, obj):
            raise Http404("No such item.")
        return obj

    def insight_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        """Delivered and read counts, the read ratio, the read rate over time,
        readers per day and who has not read it yet (with the reminder button)."""
        obj = self._viewable(request, object_id)
        after = request.GET.get("after") or "0"
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "original": obj,
            "title": f"Reading of “{obj.title}”",
            "chart_subject": "Share of the audience who have read it",
            "can_remind": _can_remind(request),
            "insight_url": reverse(f"admin:{self._insight_url_name()}", args=[obj.pk]),
        }
        try:
            stats = self.read_stats(obj)
            days = insight.item_readers_per_day(item=obj, end=timezone.now().date())
        except ApplicationError as exc:
            context["unavailable"] = exc.message
            return TemplateResponse(request, "admin/messagecenter/item_insight.html", context)
        context.update(
            stats=stats,
            timeline=stats.timeline,
            chart=rate_chart(stats.timeline, stats.audience),
            days=days,
            days_chart=bar_chart([day.first_reads for day in days]),
        )
        try:
            context["page"] = insight.item_unread_page(item=obj, after_id=int(after) if after.isdigit() else 0)
        except ApplicationError as exc:  # a message not sent yet has no readers to list
            context["unread_error"] = exc.message
        return TemplateResponse(request, "admin/messagecenter/item_insight.html", context)

    def unread_csv_view(self, request: HttpRequest, object_id: int) -> HttpResponseBase:
        """Every member of the audience who has not read it (id, username), streamed."""
        obj = self._viewable(request, object_id)
        try:
            users = insight.item_unread_all(item=obj)
            first = next(users, None)  # the first batch before any byte: errors are still a page
        except ApplicationError as exc:
            return HttpResponse(exc.message, status=503, content_type="text/plain; charset=utf-8")
        rows = insight.unread_csv_rows(users if first is None else itertools.chain([first], users))
        response = StreamingHttpResponse(rows, content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="unread-{obj.ref}.csv"'
        return response

    def readers_csv_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        """Readers per day: first reads, the running total, readers active that day."""
        obj = self._viewable(request, object_id)
        try:
            days = insight.item_readers_per_day(item=obj, end=timezone.now().date())
        except ApplicationError as exc:
            return HttpResponse(exc.message, status=503, content_type="text/plain; charset=utf-8")
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="readers-{obj.ref}.csv"'
        writer = csv.writer(response)
        writer.writerow(["day", "first_reads", "cumulative", "active_readers"])
        for day in days:
            active = "" if day.active_readers is None else day.active_readers
            writer.writerow([day.day.isoformat(), day.first_reads, day.cumulative, active])
        return response

    def remind_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        """GET: confirm with the number of users the reminder will reach; POST:
        send it (``item_remind``), once per confirmation (its idempotency key)."""
        obj = self._viewable(request, object_id)
        if not _can_remind(request):
            raise PermissionDenied
        insight_url = reverse(f"admin:{self._insight_url_name()}", args=[obj.pk])
        if request.method == "POST":
            key = request.POST.get("idempotency_key", "")
            if not _REMIND_KEY.fullmatch(key):
                messages.error(request, "The confirmation expired; confirm the reminder again.")
                return HttpResponseRedirect(insight_url)
            try:
                with transaction.atomic():
                    reminder, created = services.message_send_once(
                        key=key,
                        fingerprint=services.request_fingerprint({"remind": obj.ref}),
                        send=lambda: self._remind(request, obj, key),
                    )
            except ApplicationError as exc:
                messages.error(request, exc.message)
                return HttpResponseRedirect(insight_url)
            if created:
                messages.success(request, f"Reminder sent to {reminder.audience_size} user(s).")
            else:
                messages.info(request, "This reminder was already sent.")
            return HttpResponseRedirect(reverse("admin:messagecenter_message_change", args=[reminder.pk]))
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "original": obj,
            "title": f"Remind those who have not read “{obj.title}”",
            "insight_url": insight_url,
            "reminder_title": reminder_title(obj),
            "idempotency_key": f"admin-remind-{obj.ref}-{uuid.uuid4().hex}",
        }
        try:
            context["audience"] = sum(1 for _ in insight.item_unread_all(item=obj))
        except ApplicationError as exc:
            context["unavailable"] = exc.message
        return TemplateResponse(request, "admin/messagecenter/item_remind.html", context)

    @staticmethod
    def _remind(request: HttpRequest, obj: Any, key: str) -> Message:
        reminder = services.item_remind(item=obj, actor=request.user)  # type: ignore[arg-type]
        changes = {"reminder_of": obj.ref, "recipients": reminder.audience_size, "idempotency_key": key}
        audit_admin(request, action="create", obj=reminder, changes=changes)
        audit_admin(request, action="remind", obj=obj, changes={"reminder": reminder.pk, **changes})
        return reminder

    @admin.display(description="Read statistics")
    def read_statistics(self, obj: Any) -> SafeString:
        if not obj.pk:
            return format_html("{}", "-")
        try:
            stats = self.read_stats(obj)
        except ApplicationError as exc:
            return format_html("<p>{}</p>", exc.message)
        pushed = format_html("{} / {}", *stats.pushed) if stats.pushed else "-"
        ratio = "-" if stats.ratio is None else f"{stats.ratio:.1%}"
        return format_html(
            "<table><tbody><tr><th scope='row'>Audience</th><td>{} ({})</td></tr>"
            "<tr><th scope='row'>Pushed</th><td>{}</td></tr>"
            "<tr><th scope='row'>Read</th><td>{}</td></tr>"
            "<tr><th scope='row'>Ratio</th><td>{}</td></tr></tbody></table>"
            '<p><a href="{}">Read rate over time</a></p>',
            stats.audience,
            stats.audience_note,
            pushed,
            stats.read,
            ratio,
            reverse(f"admin:{self._insight_url_name()}", args=[obj.pk]),
        )


@admin.register(Bulletin)
class BulletinAdmin(ReadInsightAdmin):
    form = BulletinForm
    autocomplete_fields = ["groups"]
    readonly_fields = ["read_statistics"]
    list_display = ["title", "display_time", "expire_at", "audience"]
    list_filter = ["groups"]
    search_fields = ["title"]
    date_hierarchy = "display_time"

    @admin.display(description="Shown to")
    def audience(self, obj: Bulletin) -> str:
        names = [g.name for g in obj.groups.all()]
        return ", ".join(names) if names else "everyone"

    def read_stats(self, obj: Bulletin) -> insight.ItemReadStats:
        return insight.bulletin_read_stats(bulletin=obj)

    def save_model(self, request: HttpRequest, obj: Bulletin, form: ModelForm, change: bool) -> None:
        data = form.cleaned_data
        group_ids = [g.pk for g in data.get("groups") or []]
        if change:
            stored = Bulletin.objects.get(pk=obj.pk)
            fields = {k: data[k] for k in ("title", "body_html", "display_time", "expire_at")}
            services.bulletin_update(bulletin=stored, data={**fields, "group_ids": group_ids}, actor=request.user)  # type: ignore[arg-type]
        else:
            created = services.bulletin_create(
                title=data["title"],
                body_html=data["body_html"],
                display_time=data["display_time"],
                expire_at=data.get("expire_at"),
                group_ids=group_ids,
                actor=request.user,  # type: ignore[arg-type]
                translations=data.get("translations") or {},
            )
            obj.pk = created.pk

    def save_related(self, request: HttpRequest, form: ModelForm, formsets: Any, change: bool) -> None:
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)
        # groups were set by the service: no form.save_m2m()

    def delete_model(self, request: HttpRequest, obj: Bulletin) -> None:
        services.bulletin_delete(bulletin=obj, actor=request.user)  # type: ignore[arg-type]

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Bulletin]) -> None:
        for bulletin in queryset:
            services.bulletin_delete(bulletin=bulletin, actor=request.user)  # type: ignore[arg-type]


class ScheduledFilter(admin.SimpleListFilter):
    """What waits for its send_at, and what was scheduled and has been sent."""

    title = "schedule"
    parameter_name = "schedule"

    def lookups(self, request: HttpRequest, _model_admin: Any) -> list[tuple[str, str]]:
        return [("waiting", "Scheduled, not sent yet"), ("sent", "Scheduled, sent")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        waiting = Q(status=MessageStatus.SCHEDULED) if queryset.model is Message else Q(scheduled=True)
        if self.value() == "waiting":
            return queryset.filter(waiting).order_by("send_at")
        if self.value() == "sent":
            return queryset.filter(send_at__isnull=False).exclude(waiting)
        return queryset


TEST_PREFIX = "[Test] "


@admin.register(Message)
class MessageAdmin(ReadInsightAdmin):
    list_display = ["title", "category", "delivery", "status", "audience_size", "progress", "send_at", "created_at"]
    list_filter = [ScheduledFilter, "status", "delivery", "category"]
    search_fields = ["title"]
    actions = ["retract", "export_responses"]
    readonly_fields = [
        "category",
        "title",
        "summary",
        "body_preview",
        "link",
        "images",
        "sender",
        "send_at",
        "created_at",
        "expire_at",
        "everyone",
        "groups",
        "audience_size",
        "delivery",
        "status",
        "progress",
        "retracted_at",
        "read_statistics",
    ]
    fields = tuple(readonly_fields)

    def read_stats(self, obj: Message) -> insight.ItemReadStats:
        return insight.message_read_stats(message=obj)

    @admin.display(description="Body")
    def body_preview(self, obj: Message) -> str:
        return format_html("<div>{}</div>", obj.body_html[:2000])

    @admin.display(description="Fan-out progress")
    def progress(self, obj: Message) -> str:
        if obj.status in (MessageStatus.SCHEDULED, MessageStatus.CANCELLED):
            return "not sent"
        if obj.delivery == "pull":
            return "stored once, merged on read"
        done, total = selectors.message_progress(message=obj)
        percent = 100 if total == 0 else round(100 * done / total)
        return f"{done} / {total} ({percent}%)"

    @admin.action(description="Export the answers to their actions (CSV)", permissions=["view"])
    def export_responses(self, request: HttpRequest, queryset: QuerySet[Message]) -> HttpResponse:
        """One row per answer of the chosen messages, newest first."""
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="responses.csv"'
        writer = csv.writer(response)
        writer.writerow(["message_id", "message_title", "user_id", "username", "action", "at"])
        for row in manage_selectors.message_responses_export(message_ids=list(queryset.values_list("pk", flat=True))):
            writer.writerow(
                [
                    row.message_id,
                    row.message.title,
                    row.user_id,
                    row.user.get_username(),
                    row.action,
                    row.at.isoformat(),
                ]
            )
        return response

    @admin.action(description="Retract from every inbox", permissions=["delete"])
    def retract(self, request: HttpRequest, queryset: QuerySet[Message]) -> None:
        count = sum(services.message_retract(message=m, actor=request.user) for m in queryset)  # type: ignore[arg-type]
        self.message_user(request, f"{count} message(s) retracted.")

    def delete_model(self, request: HttpRequest, obj: Message) -> None:
        services.message_retract(message=obj, actor=request.user)  # type: ignore[arg-type]
        obj.delete()

    def get_urls(self) -> list[URLPattern]:
        preview = self.admin_site.admin_view(self.body_preview_view)
        return [
            path("compose/preview/", preview, name="messagecenter_message_body_preview"),
            *super().get_urls(),
        ]

    def body_preview_view(self, request: HttpRequest) -> JsonResponse:
        """The body as recipients will see it: the stored (sanitised) HTML. Staff
        only (admin_view); POST so a long body fits and the CSRF check applies."""
        if request.method != "POST":
            return JsonResponse({"error": {"code": "method_not_allowed", "message": "Use POST."}}, status=405)
        if not self.has_add_permission(request):
            raise PermissionDenied
        return JsonResponse({"html": sanitize_html(request.POST.get("body_html", ""))})

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """Compose and send. The audience is explicit (users, groups or everyone);
        everyone and groups are sent only once the operator confirmed the count
        shown on a confirmation step. "Test send" reaches the operator alone."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        test_send = "_test_send" in request.POST
        form = MessageComposeForm(request.POST or None, request.FILES or None, test_send=test_send)
        preview: dict[str, Any] | None = None
        confirm: dict[str, Any] | None = None
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            group_ids = sorted(g.pk for g in data["groups"])
            audience = {"user_ids": [u.pk for u in data["users"]], "group_ids": group_ids, "everyone": data["everyone"]}
            try:
                if test_send:
                    self._test_send(request, data)
                elif "_send" not in request.POST:
                    # The preview shows the count, so it doubles as the confirmation.
                    preview = {**self._audience_preview(audience), "groups_key": self._groups_key(audience)}
                elif (confirm := self._confirmation_needed(request, audience)) is None:
                    return self._send(request, data, audience)
            except ApplicationError as exc:
                form.add_error(None, exc.message)
        body_html = form.data.get("body_html", "") if form.is_bound else ""
        translated_body = form.data.get("translation_body_html", "") if form.is_bound else ""
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Compose message",
            "form": form,
            "media": self.media + form.media,
            "preview": preview,
            "confirm": confirm,
            "body_preview": sanitize_html(str(body_html)),
            "translation_preview": sanitize_html(str(translated_body)),
            "preview_url": reverse("admin:messagecenter_message_body_preview"),
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/messagecenter/message/compose.html", context)

    @staticmethod
    def _audience_preview(audience: dict[str, Any]) -> dict[str, Any]:
        size = services.message_audience_preview(**audience)
        pull = size is None or size > int(settings.MESSAGECENTER_PUSH_THRESHOLD)
        shown = selectors.users_active_count() if size is None else size
        return {"size": size, "count": shown, "delivery": "pull" if pull else "push"}

    def _confirmation_needed(self, request: HttpRequest, audience: dict[str, Any]) -> dict[str, Any] | None:
        """What the operator must confirm before a broadcast goes, or None.

        The confirmation names the audience it was given for (``confirm_everyone``,
        ``confirm_groups`` = the group ids): changing the groups after confirming
        asks again."""
        if audience["everyone"]:
            if request.POST.get("confirm_everyone") == "1":
                return None
            return {"everyone": True, "count": selectors.users_active_count()}
        key = self._groups_key(audience)
        if not key:
            return None
        group_ids = audience["group_ids"]
        if request.POST.get("confirm_groups") == key:
            return None
        return {
            "groups_key": key,
            "members": selectors.user_groups_member_count(group_ids=group_ids),
            **self._audience_preview(audience),
        }

    @staticmethod
    def _groups_key(audience: dict[str, Any]) -> str:
        return ",".join(map(str, audience["group_ids"]))

    def _send(self, request: HttpRequest, data: dict[str, Any], audience: dict[str, Any]) -> HttpResponse:
        content = {
            "category": data["category"],
            "title": data["title"],
            "summary": data["summary"],
            "body_html": data["body_html"],
            "link": data["link"],
            "images": data["image_urls"],
            "image_files": data["image_files"],
            "expire_at": data["expire_at"],
            "translations": data["translations"],
        }
        sender = request.user
        with transaction.atomic():
            message = services.message_send(sender=sender, send_at=data["send_at"], **content, **audience)  # type: ignore[arg-type]
            audit_admin(request, action="create", obj=message, changes={**self._audit_changes(data), **audience})
        recipients = "everyone" if message.audience_size is None else f"{message.audience_size} user(s)"
        if data["send_at"] is not None:
            self.message_user(request, f"Scheduled for {data['send_at']:%Y-%m-%d %H:%M} UTC to {recipients}.")
        else:
            self.message_user(request, f"Sent by {message.delivery} to {recipients}.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:messagecenter_message_change", args=[message.pk]))

    def _test_send(self, request: HttpRequest, data: dict[str, Any]) -> None:
        """The message as composed, to the operator alone, now, titled "[Test] ..."."""
        me = int(request.user.pk or 0)  # admin_view: always a signed-in staff user
        with transaction.atomic():
            message = services.message_send(
                sender=request.user,  # type: ignore[arg-type]
                category=data["category"],
                title=f"{TEST_PREFIX}{data['title']}"[:200],
                summary=data["summary"],
                body_html=data["body_html"],
                link=data["link"],
                images=data["image_urls"],
                image_files=data["image_files"],
                expire_at=data["expire_at"],
                user_ids=[me],
                translations=data["translations"],
            )
            audit_admin(
                request,
                action="create",
                obj=message,
                changes={**self._audit_changes(data), "title": message.title, "user_ids": [me]},
            )
        self.message_user(
            request, f"Test sent to you only ({request.user.get_username()}); nobody else got it.", messages.SUCCESS
        )

    @staticmethod
    def _audit_changes(data: dict[str, Any]) -> dict[str, Any]:
        skip = {"image_files", "groups", "users"}
        return {k: v for k, v in data.items() if k not in skip}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Message]:
        return super().get_queryset(request).select_related("sender")


# --- subscriptions, notifications and rules --------------------------------------


@admin.register(MessageType)
class MessageTypeAdmin(AuditedAdminMixin, admin.ModelAdmin):
    list_display = ["code", "name", "category", "self_service", "default_ttl_seconds", "created_at"]
    search_fields = ["code", "name"]
    list_filter = ["category", "self_service"]


@admin.register(Subscription)
class SubscriptionAdmin(AuditedAdminMixin, admin.ModelAdmin):
    """Saves go through the ORM (model validation checks "exactly one of user or
    group" and uniqueness); the receivers project the Redis subscriber sets."""

    list_display = ["message_type", "scope", "user", "group", "created_at"]
    list_filter = ["message_type", "scope"]
    search_fields = ["scope", "user__username", "group__name"]
    raw_id_fields = ["user"]


@admin.register(Notification)
class NotificationAdmin(AuditedAdminMixin, admin.ModelAdmin):
    list_display = [
        "title",
        "message_type",
        "scope",
        "recipients",
        "scheduled",
        "send_at",
        "created_at",
        "expire_at",
        "withdrawn",
        "rule",
    ]
    list_filter = [ScheduledFilter, "message_type", "withdrawn", "scope"]
    search_fields = ["title", "scope"]
    actions = ["withdraw"]
    readonly_fields = [
        "message_type",
        "scope",
        "category",
        "title",
        "body_preview",
        "created_at",
        "expire_at",
        "recipients",
        "rule",
        "source_type",
        "source_id",
        "withdrawn",
        "withdrawn_at",
        "scheduled",
        "send_at",
    ]
    fields = tuple(readonly_fields)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # sent through the API, the service or a rule

    @admin.display(description="Body")
    def body_preview(self, obj: Notification) -> str:
        return format_html("<div>{}</div>", obj.body_html[:2000])

    @admin.action(description="Withdraw from every inbox", permissions=["change"])
    def withdraw(self, request: HttpRequest, queryset: QuerySet[Notification]) -> None:
        count = sum(services.notification_cancel_or_withdraw(notification=n) for n in queryset)
        self.message_user(request, f"{count} notification(s) withdrawn.")

    def delete_model(self, request: HttpRequest, obj: Notification) -> None:
        services.notification_cancel_or_withdraw(notification=obj)
        obj.delete()


class RuleRunInline(admin.TabularInline):
    """The rule's run history, newest first (read-only)."""

    model = RuleRun
    fields = ["started_at", "matches", "sent", "withdrawn", "errors"]
    readonly_fields = ["started_at", "matches", "sent", "withdrawn", "errors"]
    extra = 0
    can_delete = False
    max_num = 0
    ordering = ["-started_at"]


@admin.register(NotificationRule)
class NotificationRuleAdmin(AuditedAdminMixin, admin.ModelAdmin):
    form = NotificationRuleForm
    list_display = ["name", "enabled", "content_type", "message_type", "interval_seconds", "last_run_at", "last_result"]
    list_filter = ["enabled", "message_type"]
    search_fields = ["name"]
    readonly_fields = ["last_run_at"]
    inlines = [RuleRunInline]
    actions = ["dry_run", "run_now"]
    audit_skip_actions = ("dry_run",)  # a report: it changes nothing

    @admin.display(description="Last run")
    def last_result(self, obj: NotificationRule) -> str:
        run = obj.runs.first()
        if run is None:
            return "never"
        state = "error" if run.errors else "ok"
        return f"{state}: {run.matches} matching, {run.sent} sent, {run.withdrawn} withdrawn"

    @admin.action(description="Dry run: show what would be notified (sends nothing)", permissions=["view"])
    def dry_run(self, request: HttpRequest, queryset: QuerySet[NotificationRule]) -> HttpResponse:
        outcomes = services.rules_run(rules=queryset.select_related("content_type", "message_type"), dry_run=True)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Dry run",
            "outcomes": outcomes,
        }
        return TemplateResponse(request, "admin/messagecenter/notificationrule/dry_run.html", context)

    @admin.action(description="Run now", permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[NotificationRule]) -> None:
        outcomes = services.rules_run(rules=queryset.select_related("content_type", "message_type"))
        sent = sum(o.sent for o in outcomes)
        failed = sum(1 for o in outcomes if o.errors)
        level = messages.WARNING if failed else messages.SUCCESS
        self.message_user(request, f"{len(outcomes)} rule(s) run: {sent} sent, {failed} with errors.", level)


@admin.register(StockLevel)
class StockLevelAdmin(AuditedAdminMixin, admin.ModelAdmin):
    """Demo business table (see StockLevel): edit quantities, then run the rule."""

    list_display = ["warehouse", "location", "sku", "quantity"]
    list_filter = ["warehouse"]
    search_fields = ["location", "sku"]
    list_editable = ["quantity"]


@admin.register(PendingDelivery)
class PendingDeliveryAdmin(AuditedAdminMixin, admin.ModelAdmin):
    """Delivery work committed and not yet in Redis: a row stays until its work
    reached Redis, so a long list here is an outage or a failing job to look at.
    "Due now" is audited per row by the mixin, in the action's transaction."""

    list_display = ["task", "object_id", "index", "attempts", "due_at", "created_at", "short_error"]
    list_filter = ["task"]
    search_fields = ["object_id"]
    ordering = ["due_at", "id"]
    readonly_fields = ["task", "object_id", "index", "attempts", "due_at", "created_at", "last_error"]
    actions = ["due_now"]

    @admin.display(description="last error")
    def short_error(self, obj: PendingDelivery) -> str:
        return obj.last_error[:120]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: PendingDelivery | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: PendingDelivery | None = None) -> bool:
        # Deleting a row would drop a delivery for good.
        return False

    def has_due_now_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("messagecenter.change_pendingdelivery"))

    @admin.action(description="Hand the selected deliveries over again now", permissions=["due_now"])
    def due_now(self, request: HttpRequest, queryset: QuerySet[PendingDelivery]) -> None:
        count = services.delivery_due_now(ids=list(queryset.values_list("pk", flat=True)))
        self.message_user(request, f"{count} deliveries due now.")
