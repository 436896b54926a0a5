"""The notification row as django-notifications-hq defined it: the same table
columns, queryset methods and instance methods, so existing data and callers
keep working.

Read and deleted flags change here (instance saves, the queryset's UPDATEs);
the inbox hears of each change after commit through ``notifications.receivers``
(``post_save``/``post_delete`` of a row, ``marks_changed`` of an UPDATE).
"""

from datetime import datetime
from typing import Any, Self

from django.conf import settings
from django.contrib.contenttypes.fields import GenericForeignKey
from django.contrib.contenttypes.models import ContentType
from django.contrib.humanize.templatetags.humanize import naturalday, naturaltime
from django.core.exceptions import ImproperlyConfigured
from django.db import models
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.timesince import timesince
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from notifications.settings import soft_delete
from notifications.signals import marks_changed
from notifications.utils import id2slug


def is_soft_delete() -> bool:
    return soft_delete()


def assert_soft_delete() -> None:
    """``deleted``/``active`` filters mean something only with SOFT_DELETE on:
    without it a delete removes the row, and the flag is never set."""
    if not soft_delete():
        raise ImproperlyConfigured(
            "Set DJANGO_NOTIFICATIONS_CONFIG['SOFT_DELETE'] = True to use the deleted flag of notifications."
        )


class NotificationQuerySet(models.QuerySet):
    def unsent(self) -> Self:
        return self.filter(emailed=False)

    def sent(self) -> Self:
        return self.filter(emailed=True)

    def unread(self, include_deleted: bool = False) -> Self:
        """Unread rows; with SOFT_DELETE on, deleted ones only when asked for.
        (With it off nothing sets ``deleted``: the filter would only cost.)"""
        if soft_delete() and not include_deleted:
            return self.filter(unread=True, deleted=False)
        return self.filter(unread=True)

    def read(self, include_deleted: bool = False) -> Self:
        if soft_delete() and not include_deleted:
            return self.filter(unread=False, deleted=False)
        return self.filter(unread=False)

    def deleted(self) -> Self:
        assert_soft_delete()
        return self.filter(deleted=True)

    def active(self) -> Self:
        assert_soft_delete()
        return self.filter(deleted=False)

    def _marked(self, rows: "NotificationQuerySet", recipient: Any, **values: Any) -> int:
        """UPDATE ``rows`` (of ``recipient`` when given); returns rows changed.

        The recipients are read first: an UPDATE sends no per-row signal, and
        the inbox must hear which users' notifications changed."""
        if recipient:
            rows = rows.filter(recipient=recipient)
        recipient_ids = list(rows.order_by().values_list("recipient_id", flat=True).distinct())
        if not recipient_ids:
            return 0
        changed = rows.update(**values)
        if changed:
            marks_changed.send(sender=self.model, recipient_ids=recipient_ids)
        return changed

    def mark_all_as_read(self, recipient: Any = None) -> int:
        # Deleted rows too: a soft-deleted notification must not stay unread.
        return self._marked(self.unread(include_deleted=True), recipient, unread=False)

    def mark_all_as_unread(self, recipient: Any = None) -> int:
        return self._marked(self.read(include_deleted=True), recipient, unread=True)

    def mark_all_as_deleted(self, recipient: Any = None) -> int:
        return self._marked(self.active(), recipient, deleted=True)

    def mark_all_as_active(self, recipient: Any = None) -> int:
        return self._marked(self.deleted(), recipient, deleted=False)

    def mark_as_unsent(self, recipient: Any = None) -> int:
        # ``emailed`` is the site's own bookkeeping: the inbox has nothing to hear.
        rows = self.sent()
        return (rows.filter(recipient=recipient) if recipient else rows).update(emailed=False)

    def mark_as_sent(self, recipient: Any = None) -> int:
        rows = self.unsent()
        return (rows.filter(recipient=recipient) if recipient else rows).update(emailed=True)


class Level(models.TextChoices):
    # Lower-case names: callers write ``Notification.LEVELS.info`` as with the incumbent.
    success = "success", _("success")
    info = "info", _("info")
    warning = "warning", _("warning")
    error = "error", _("error")


class AbstractNotification(models.Model):
    """``<actor> <verb> [<action_object>] [on <target>] <time>``, for one recipient."""

    LEVELS = Level

    level = models.CharField(_("level"), choices=Level.choices, default=Level.info, max_length=20)
    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="notifications",
        verbose_name=_("recipient"),
        blank=False,
    )
    unread = models.BooleanField(_("unread"), default=True, blank=False, db_index=True)

    actor_content_type = models.ForeignKey(
        ContentType, on_delete=models.CASCADE, related_name="notify_actor", verbose_name=_("actor content type")
    )
    actor_object_id = models.CharField(_("actor object id"), max_length=255)
    actor = GenericForeignKey("actor_content_type", "actor_object_id")

    verb = models.CharField(_("verb"), max_length=255)
    # Nullable text, as in the incumbent's table: its rows hold NULLs.
    description = models.TextField(_("description"), blank=True, null=True)  # noqa: DJ001

    target_content_type = models.ForeignKey(
        ContentType,
        on_delete=models.CASCADE,
        related_name="notify_target",
        verbose_name=_("target content type"),
        blank=True,
        null=True,
    )
    target_object_id = models.CharField(_("target object id"), max_length=255, blank=True, null=True)  # noqa: DJ001
    target = GenericForeignKey("target_content_type", "target_object_id")

    action_object_content_type = models.ForeignKey(
        ContentType,
        on_delete=models.CASCADE,
        related_name="notify_action_object",
        verbose_name=_("action object content type"),
        blank=True,
        null=True,
    )
    action_object_object_id = models.CharField(  # noqa: DJ001
        _("action object object id"), max_length=255, blank=True, null=True
    )
    action_object = GenericForeignKey("action_object_content_type", "action_object_object_id")

    timestamp = models.DateTimeField(_("timestamp"), default=timezone.now, db_index=True)
    public = models.BooleanField(_("public"), default=True, db_index=True)
    deleted = models.BooleanField(_("deleted"), default=False, db_index=True)
    emailed = models.BooleanField(_("emailed"), default=False, db_index=True)
    data = models.JSONField(_("data"), blank=True, null=True)

    objects = NotificationQuerySet.as_manager()

    class Meta:
        abstract = True
        ordering = ("-timestamp",)
        verbose_name = _("Notification")
        verbose_name_plural = _("Notifications")

    def __str__(self) -> str:
        parts = {
            "actor": self.actor,
            "verb": self.verb,
            "action_object": self.action_object,
            "target": self.target,
            "timesince": self.timesince(),
        }
        if self.target:
            if self.action_object:
                return gettext("%(actor)s %(verb)s %(action_object)s on %(target)s %(timesince)s ago") % parts
            return gettext("%(actor)s %(verb)s %(target)s %(timesince)s ago") % parts
        if self.action_object:
            return gettext("%(actor)s %(verb)s %(action_object)s %(timesince)s ago") % parts
        return gettext("%(actor)s %(verb)s %(timesince)s ago") % parts

    def timesince(self, now: datetime | None = None) -> str:
        """How long ago it happened, in words (``django.utils.timesince``)."""
        return timesince(self.timestamp, now)

    def naturalday(self) -> str:
        """``today``, ``yesterday``, or the date."""
        return str(naturalday(self.timestamp))

    def naturaltime(self) -> str:
        """``now``, ``2 minutes ago``, ..."""
        return str(naturaltime(self.timestamp))

    @property
    def slug(self) -> int:
        return id2slug(self.pk)

    def mark_as_read(self) -> None:
        if self.unread:
            self.unread = False
            self.save()

    def mark_as_unread(self) -> None:
        if not self.unread:
            self.unread = True
            self.save()

    def _object_link(self, content_type: ContentType | None, object_id: str | None) -> SafeString | str | None:
        """A link to the object's admin change page, or its bare id when it has none."""
        if content_type is None:
            return object_id
        try:
            url = reverse(f"admin:{content_type.app_label}_{content_type.model}_change", args=(object_id,))
        except NoReverseMatch:
            return object_id
        return format_html("<a href='{}'>{}</a>", url, object_id)

    def actor_object_url(self) -> SafeString | str | None:
        return self._object_link(self.actor_content_type, self.actor_object_id)

    def action_object_url(self) -> SafeString | str | None:
        return self._object_link(self.action_object_content_type, self.action_object_object_id)

    def target_object_url(self) -> SafeString | str | None:
        return self._object_link(self.target_content_type, self.target_object_id)
