"""PostgreSQL truth of the message centre: groups, bulletins, messages and the
per-user state that cannot be derived (hidden items).

Broadcasts never write a row per user: an audience is a group link, an
``everyone`` flag, or a compressed (pyroaring) bitmap of user ids.
"""

from django.conf import settings
from django.db import models
from pyroaring import BitMap


class Category(models.TextChoices):
    SYSTEM = "system", "System"
    PROMOTION = "promotion", "Promotion"
    TRANSACTION = "transaction", "Transaction"
    INTERACTION = "interaction", "Interaction"


CATEGORIES: tuple[str, ...] = tuple(c.value for c in Category)


class UserGroup(models.Model):
    name = models.CharField(max_length=100, unique=True)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="UserGroupMembership", related_name="message_groups", blank=True
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class UserGroupMembership(models.Model):
    group = models.ForeignKey(UserGroup, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="message_group_memberships"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # Also serves "members of a group" (audience resolution, member counts).
            models.UniqueConstraint(fields=["group", "user"], name="mc_membership_unique"),
        ]
        indexes = [
            # user_group_ids(): the groups of one user, mirrored into Redis after each change.
            models.Index(fields=["user", "group"], name="mc_membership_user_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id} in {self.group_id}"


class ItemSlotMonth(models.Model):
    """Allocates (month, offset) slots for seed 004's per-user bitmaps.

    Offsets are dense per month (the "month base"): a user's push/read bitmap
    for a month is as large as the number of items created that month, not
    the global id. The row is locked while allocating, so offsets never clash.
    """

    month = models.PositiveIntegerField(primary_key=True)  # yyyymm
    next_offset = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.month}: {self.next_offset}"


class Bulletin(models.Model):
    """Operator-configured bulletin (seed 002), merged into members' system lists on read."""

    title = models.CharField(max_length=200)
    body_html = models.TextField(blank=True)
    display_time = models.DateTimeField()
    expire_at = models.DateTimeField(null=True, blank=True)
    # No groups means everyone.
    groups = models.ManyToManyField(UserGroup, related_name="bulletins", blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    slot_month = models.PositiveIntegerField(editable=False)
    slot_offset = models.BigIntegerField(editable=False)

    class Meta:
        ordering = ["-display_time", "-id"]
        indexes = [
            # Admin list ordering and the rebuild of bulletin_notification_config.
            models.Index(fields=["display_time"], name="mc_bulletin_display_idx"),
        ]

    def __str__(self) -> str:
        return self.title

    @property
    def ref(self) -> str:
        return f"b{self.pk}"


class DeliveryMode(models.TextChoices):
    PUSH = "push", "Push (write fan-out)"
    PULL = "pull", "Pull (merged on read)"


class MessageStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    DELIVERING = "delivering", "Delivering"
    DELIVERED = "delivered", "Delivered"
    RETRACTED = "retracted", "Retracted"
    EXPIRED = "expired", "Expired (cleaned up)"


class Message(models.Model):
    category = models.CharField(max_length=16, choices=Category.choices)
    title = models.CharField(max_length=200)
    summary = models.CharField(max_length=300, blank=True)
    body_html = models.TextField(blank=True)
    link = models.URLField(max_length=500, blank=True)
    images = models.JSONField(default=list, blank=True)  # image URLs; uploaded files are MessageImage rows
    sender = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField()
    expire_at = models.DateTimeField(null=True, blank=True)

    # Audience as given: everyone, groups, explicit users (a roaring bitmap, not rows).
    everyone = models.BooleanField(default=False)
    groups = models.ManyToManyField(UserGroup, related_name="messages", blank=True)
    users_bitmap = models.BinaryField(default=bytes, blank=True)
    # Audience resolved at send time (explicit users plus the groups' members then);
    # empty for everyone. This is what push fan-out and pull merges deliver to.
    audience_bitmap = models.BinaryField(default=bytes, blank=True, editable=False)
    audience_size = models.PositiveIntegerField(null=True, blank=True, editable=False)

    delivery = models.CharField(max_length=8, choices=DeliveryMode.choices, editable=False)
    status = models.CharField(max_length=16, choices=MessageStatus.choices, default=MessageStatus.QUEUED)
    fanout_total = models.PositiveIntegerField(default=0, editable=False)
    retracted_at = models.DateTimeField(null=True, blank=True)
    slot_month = models.PositiveIntegerField(editable=False)
    slot_offset = models.BigIntegerField(editable=False)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # Admin list (newest first) and rebuilds of pull items by time.
            models.Index(fields=["-created_at"], name="mc_message_created_idx"),
            # Expiry clean-up and the admin status filter.
            models.Index(fields=["status", "expire_at"], name="mc_message_status_idx"),
        ]

    def __str__(self) -> str:
        return self.title

    @property
    def ref(self) -> str:
        return f"m{self.pk}"

    @property
    def audience(self) -> BitMap:
        return BitMap.deserialize(bytes(self.audience_bitmap)) if self.audience_bitmap else BitMap()

    @property
    def explicit_users(self) -> BitMap:
        return BitMap.deserialize(bytes(self.users_bitmap)) if self.users_bitmap else BitMap()


class MessageImage(models.Model):
    """An image file uploaded in the admin; its URL joins ``Message.images``."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="image_files")
    file = models.FileField(upload_to="messagecenter/images/")
    position = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["position", "id"]

    def __str__(self) -> str:
        return str(self.file.name)


class FanoutChunk(models.Model):
    """One delivered chunk of a push fan-out: progress, and idempotence of reruns."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="fanout_chunks")
    index = models.PositiveIntegerField()
    size = models.PositiveIntegerField()
    done_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # Also serves the progress sum per message.
            models.UniqueConstraint(fields=["message", "index"], name="mc_fanoutchunk_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.message_id}#{self.index}"


class InboxHidden(models.Model):
    """A user deleted an item from their inbox: durable, so a rebuild keeps it hidden."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="hidden_inbox_items")
    item_id = models.CharField(max_length=40)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # Also serves the rebuild of a user's hidden set (user_id prefix).
            models.UniqueConstraint(fields=["user", "item_id"], name="mc_hidden_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.item_id}"
