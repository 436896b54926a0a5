"""Announcements: broadcast to platforms; read state in PostgreSQL rows, mirrored in Redis bitmaps."""

from datetime import datetime

from django.conf import settings
from django.db import models
from django.utils import timezone

from accounts.models import Platform
from accounts.platforms import ALL_PLATFORMS

# Largest primary key a BigAutoField holds: larger ids in URLs are simply absent
# (PostgreSQL would otherwise fail the query with "bigint out of range").
MAX_ID = 2**63 - 1


class Announcement(models.Model):
    title = models.CharField(max_length=200)
    summary = models.CharField(max_length=300, blank=True)
    body_html = models.TextField(help_text="Sanitised HTML (scripts, event handlers and unsafe links removed).")
    publish_at = models.DateTimeField(default=timezone.now)
    expire_at = models.DateTimeField(null=True, blank=True)
    pinned = models.BooleanField(default=False)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="announcements"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # {language code: {"title", "summary"?, "body_html"?}}: shown to readers of that language.
    translations = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-publish_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(expire_at__isnull=True) | models.Q(expire_at__gt=models.F("publish_at")),
                name="announcement_expire_after_publish",
            ),
        ]
        indexes = [
            # The admin list and the PostgreSQL fallback of the user's list
            # (newest first, keyset paging on (publish_at, id)).
            models.Index(fields=["-publish_at", "-id"], name="announcement_publish_idx"),
        ]

    def __str__(self) -> str:
        return self.title

    @property
    def platforms(self) -> list[str]:
        """Targeted platforms in canonical order (uses a prefetch when there is one)."""
        targeted = {row.platform for row in self.platform_rows.all()}
        return [p for p in ALL_PLATFORMS if p in targeted]

    def status_at(self, now: datetime) -> str:
        """scheduled / live / expired at ``now`` (visible from publish_at until expire_at)."""
        if self.publish_at > now:
            return "scheduled"
        if self.expire_at is not None and self.expire_at <= now:
            return "expired"
        return "live"


class AnnouncementPlatform(models.Model):
    """One row per targeted platform: an announcement reaches at most three, so a
    child table stays tiny and works on SQLite and PostgreSQL alike."""

    announcement = models.ForeignKey(Announcement, on_delete=models.CASCADE, related_name="platform_rows")
    platform = models.CharField(max_length=16, choices=Platform.choices)

    class Meta:
        constraints = [
            # Its index also serves announcement.platform_rows (the platforms of one announcement).
            models.UniqueConstraint(fields=["announcement", "platform"], name="announcementplatform_unique"),
        ]
        indexes = [
            # readmodel rebuilds: the not-yet-expired announcements of one platform
            # (selectors.platform_index_entries), and the fallback list by platform.
            models.Index(fields=["platform", "announcement"], name="announcementplatform_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.announcement_id}@{self.platform}"


class AnnouncementRead(models.Model):
    """A user read an announcement (on one of their platforms it targets): the truth
    the Redis read bitmaps mirror.

    One row per (user, announcement, platform) the user marked read, written in
    the mark's transaction before it is acknowledged and deleted by an unread
    mark. Only readers cost a row: an announcement nobody opened costs none.
    """

    announcement = models.ForeignKey(Announcement, on_delete=models.CASCADE, related_name="reads")
    platform = models.CharField(max_length=16, choices=Platform.choices)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="announcement_reads")

    class Meta:
        constraints = [
            # Its index serves the restore of one announcement's bitmap on one
            # platform, and of one chunk of users (a user id range) of it.
            models.UniqueConstraint(fields=["announcement", "platform", "user"], name="announcementread_unique"),
        ]
        indexes = [
            # Degraded reads and marks: one user's rows of some announcements.
            models.Index(fields=["user", "announcement"], name="announcementread_user_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id} read {self.announcement_id}@{self.platform}"
