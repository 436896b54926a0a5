"""PostgreSQL truth of the message centre: groups, bulletins, messages and the
per-user state that cannot be derived (hidden items).

Broadcasts never write a row per user: an audience is a group link, an
``everyone`` flag, or a compressed (pyroaring) bitmap of user ids.
"""

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _
from pyroaring import BitMap

from webhooks.models import DeliveryAttempts


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
            # projection.user_groups(): the groups of each user, mirrored into Redis after each change.
            models.Index(fields=["user", "group"], name="mc_membership_user_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id} in {self.group_id}"


class ItemSlotMonth(models.Model):
    """Allocates (month, offset) slots for the per-user push and read bitmaps.

    Offsets are dense per month (the "month base"): a user's push/read bit-set
    for a month is at most as large as a bitmap of the items created that
    month (not the global id), and a set of the user's own offsets while that
    is smaller (messagecenter/lua/_bits.lua). The row is locked while
    allocating, so offsets never clash.
    """

    month = models.PositiveIntegerField(primary_key=True)  # yyyymm
    next_offset = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.month}: {self.next_offset}"


class Bulletin(models.Model):
    """Operator-configured bulletin, merged into members' system lists on read."""

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
    # {language code: {"title", "summary"?, "body_html"?}}, validated by services.translations.
    translations = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-display_time", "-id"]
        indexes = [
            # Bitmap entries of first reads name items by slot (readmodel/reads.py).
            models.Index(fields=["slot_month", "slot_offset"], name="mc_bulletin_slot_idx"),
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
    # Waiting for send_at: stored, reaching nobody (no slot, no Redis data yet).
    SCHEDULED = "scheduled", "Scheduled"
    # A scheduled message cancelled before its time: it never reached anyone.
    CANCELLED = "cancelled", "Cancelled (never sent)"
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
    # When a scheduled message is (or was) to be sent; null: sent at once.
    send_at = models.DateTimeField(null=True, blank=True)
    # Grouping (messagecenter.services.grouping): items of one key collapse
    # into one row of each recipient's inbox while the group is unread; the
    # actor is the display name its row lists ("Ann, Ben and 2 others").
    group_key = models.CharField(max_length=100, blank=True, default="")
    actor = models.CharField(max_length=100, blank=True, default="")
    # A scheduled message has month 0 and offset 0 (no real slot) until it is sent.
    slot_month = models.PositiveIntegerField(editable=False)
    slot_offset = models.BigIntegerField(editable=False)
    # [{"id": slug, "label": str}], one to three (services.responses validates them).
    actions = models.JSONField(default=list, blank=True)
    translations = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # Bitmap entries of first reads name items by slot (readmodel/reads.py).
            models.Index(fields=["slot_month", "slot_offset"], name="mc_message_slot_idx"),
            # The scheduled-send job: scheduled messages whose send_at has passed.
            models.Index(fields=["send_at"], condition=models.Q(status="scheduled"), name="mc_message_scheduled_idx"),
            # Admin list (newest first) and rebuilds of pull items by time.
            models.Index(fields=["-created_at"], name="mc_message_created_idx"),
            # The inbox served from PostgreSQL scans the pull messages newest
            # first: without it that scan walks every pushed message too.
            models.Index(
                fields=["-created_at", "-id"], condition=models.Q(delivery="pull"), name="mc_message_pull_idx"
            ),
            # Expiry clean-up and the admin status filter.
            models.Index(fields=["status", "expire_at"], name="mc_message_status_idx"),
            # Retention: the oldest item of a group key (ends older than it go).
            models.Index(
                fields=["group_key", "created_at"], condition=~models.Q(group_key=""), name="mc_message_group_idx"
            ),
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


class MessageSendKey(models.Model):
    """An idempotency key of ``POST /api/v1/manage/messages/``: one key, one message.

    Keys are global (not per operator): a client retrying through another
    operator's token still gets the first message. The unique constraint on
    ``key`` is what makes concurrent retries safe: the second INSERT waits for
    the first transaction and then fails, and the retry answers with the
    message the first one stored. ``fingerprint`` is a hash of the request
    body: the same key with another body is a conflict. A key counts for
    ``IDEMPOTENCY_WINDOW`` (24 h): an older row is replaced when its key is
    used again, and the cleanup task deletes old rows.
    """

    key = models.CharField(max_length=200, unique=True)
    fingerprint = models.CharField(max_length=64)
    # Null only inside the transaction that stores the key and then the message.
    message = models.ForeignKey("Message", null=True, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField()

    class Meta:
        indexes = [
            # message_send_keys_purge(): keys past the window, oldest first.
            models.Index(fields=["created_at"], name="mc_sendkey_created_idx"),
        ]

    def __str__(self) -> str:
        return self.key


class MessageImage(models.Model):
    """An image file uploaded in the admin; its URL joins ``Message.images``."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="image_files")
    file = models.FileField(upload_to="messagecenter/images/")
    position = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["position", "id"]

    def __str__(self) -> str:
        return str(self.file.name)


class MessageResponse(models.Model):
    """A user's answer to one of a message's actions: one per (message, user),
    the first one stands."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="responses")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mc_message_responses")
    action = models.CharField(max_length=32)
    at = models.DateTimeField()

    class Meta:
        constraints = [
            # Its index also serves the second response's check and the user's responses on a page
            # from PostgreSQL (the fallback).
            models.UniqueConstraint(fields=["message", "user"], name="mc_response_unique"),
        ]
        indexes = [
            # The operators' list of one message's responses, newest first (keyset on (at, id)).
            models.Index(fields=["message", "-at", "-id"], name="mc_response_message_at_idx"),
            # The rebuild and the fallback: one user's responses.
            models.Index(fields=["user"], name="mc_response_user_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id} -> {self.message_id}: {self.action}"


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


class Recipient(models.Model):
    """A user an item's fan-out reached (the subclasses name the item)."""

    # No index of its own: the primary key (user first) serves a user's rows.
    # No constraint either: an audience is fixed at send time and may name a
    # user deleted before their chunk runs; that chunk's rows must still commit
    # (Django's delete of a user removes the rows it finds).
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )

    class Meta:
        abstract = True


class MessageRecipient(Recipient):
    """A user a push message was fanned out to: the index a user's fill reads
    their push messages by (their rows, not every live message's audience).

    Written by each fan-out chunk before its Redis write (``INSERT ... ON
    CONFLICT DO NOTHING``: a rerun adds nothing), so whatever Redis got,
    PostgreSQL names. Only push messages have rows: they go to at most
    ``MESSAGECENTER_PUSH_THRESHOLD`` users, and Redis already holds an entry
    per recipient; larger audiences are pulled and merged on read, with no
    row per user. The send-time audience bitmap stays the truth of who was
    addressed; these rows say which chunks of it were delivered.
    """

    pk = models.CompositePrimaryKey("user_id", "message_id")
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="recipient_rows")

    def __str__(self) -> str:
        return f"{self.user_id}: m{self.message_id}"


class PendingDelivery(models.Model):
    """Delivery work (a message's or notification's delivery, or one fan-out
    chunk) committed with the data it delivers and not done yet.

    Written in the transaction that stores the message (or, for chunks, by
    the delivery that splits the audience) and deleted only when the work has
    reached Redis, so neither a broker nor a Redis that is down loses it:
    ``messagecenter.services.delivery`` hands due rows to Celery and runs them
    again until they succeed. ``task`` is the Celery task's name; ``index``
    the chunk (0 for a whole delivery).
    """

    task = models.CharField(max_length=64)
    object_id = models.BigIntegerField()
    index = models.PositiveIntegerField(default=0)
    # When the relay may hand it (again) to Celery: just after a failure, or
    # once a hand-over had time to run without deleting the row.
    due_at = models.DateTimeField()
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["task", "object_id", "index"], name="mc_pendingdelivery_unique"),
        ]
        indexes = [
            # The relay's scan of due rows.
            models.Index(fields=["due_at"], name="mc_pendingdelivery_due_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.task}({self.object_id}, {self.index})"


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
        indexes = [
            # Retention: the hidden rows naming items being purged.
            models.Index(fields=["item_id"], name="mc_hidden_item_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.item_id}"


class InboxItemState(models.Model):
    """A user archived or snoozed an item of their inbox: one row per user and item.

    ``archived`` keeps it out of the list and the counts until unarchived.
    ``snoozed_until`` keeps it out until then; afterwards the item is back,
    unread, placed at that time (the row stays: it holds the item's place).
    A delete (``InboxHidden``) drops the row.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="inbox_item_states")
    item_id = models.CharField(max_length=40)
    archived = models.BooleanField(default=False)
    snoozed_until = models.DateTimeField(null=True, blank=True)
    # When the snooze was asked (it cleared the item's read bit then).
    snoozed_at = models.DateTimeField(null=True, blank=True)
    # When an unarchive last put the item back in the list. With a snooze
    # that an archive cancelled (``snoozed_until`` None, ``snoozed_at`` set)
    # and an unarchive after it, it ends the time the item was out of the
    # list. One from before the snooze ends nothing.
    listed_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            # Also serves the rebuild and the fallback's lookup by user (user_id prefix).
            models.UniqueConstraint(fields=["user", "item_id"], name="mc_item_state_unique"),
        ]
        indexes = [
            # The retention purge drops the rows of purged items by item.
            models.Index(fields=["item_id"], name="mc_item_state_item_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.item_id}"


class InboxGroupEnd(models.Model):
    """One ended group of a user's grouped items (messagecenter.services.grouping):
    the user read, archived or deleted its row, whose time was ``until_ms``.
    The ends cut a key's items into groups (an item belongs to the first end at
    or after its time, or to the open group), so PostgreSQL says what Redis
    shows and a rebuild puts the same groups back. A row per user action,
    like a hide."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="inbox_group_ends")
    group_key = models.CharField(max_length=100)
    until_ms = models.BigIntegerField()
    # The ref of the group's row then: an item of the key at exactly ``until_ms``
    # is in the ended group only if it sorts at or below the row (as the list
    # orders equal times, by member), so a new item in the same millisecond as
    # the read starts a new group. Blank for ends recorded before it was kept.
    row_ref = models.CharField(max_length=40, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # One end per group (two groups of a key may end in the same ms: the
            # second began after the first's row); the rebuild reads them per user and key through it.
            models.UniqueConstraint(
                fields=["user", "group_key", "until_ms", "row_ref"], name="mc_group_end_row_unique"
            ),
        ]
        indexes = [
            # Retention drops a key's ends older than its oldest item by this.
            models.Index(fields=["group_key", "until_ms"], name="mc_group_end_key_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}:{self.group_key}@{self.until_ms}"


class InboxReadMonth(models.Model):
    """One user's committed read state for one month: the truth the Redis bitmaps mirror.

    ``read`` and ``ever`` are serialized pyroaring BitMaps of item offsets
    within ``month`` (an item's slot, ``ItemSlotMonth``): the items read now,
    and the items ever read (never cleared; first reads count once). A mark
    changes the row in the request's transaction (the row locked) before it
    is acknowledged; Redis follows after commit. So a user costs one row per
    month they acted in, whatever a broadcast reached, and a bit per item
    they marked (a "read all" sets the bits of the items it read).
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="inbox_read_months")
    month = models.PositiveIntegerField()  # yyyymm
    read = models.BinaryField(default=bytes)
    ever = models.BinaryField(default=bytes)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            # Also serves "every month of one user" (the mark's row lock, fallback reads, restore).
            models.UniqueConstraint(fields=["user", "month"], name="mc_inboxreadmonth_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}/{self.month} read state"


class InboxSeen(models.Model):
    """A user's committed ``seen`` watermark (the unseen badge), in ms; it only moves forward."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True, related_name="inbox_seen"
    )
    seen_ms = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.user_id} seen at {self.seen_ms}"


# --- Subscriptions and typed notifications -------------------------------------


def _default_ttl() -> int:
    return int(settings.MESSAGECENTER_NOTIFICATION_TTL)


class MessageType(models.Model):
    """A kind of notification business systems raise (low stock, a failed import, ...)."""

    code = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=100)
    category = models.CharField(max_length=16, choices=Category.choices, default=Category.SYSTEM)
    default_ttl_seconds = models.PositiveIntegerField(default=_default_ttl)
    # Users may subscribe themselves to it (the user's own subscriptions API and settings page).
    self_service = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["code"]

    def __str__(self) -> str:
        return f"{self.name} ({self.code})"


class Subscription(models.Model):
    """A subscriber: a user or a group ("role") subscribes to a
    message type in a scope (a warehouse, ...). A group is resolved to its
    members when a notification is sent."""

    message_type = models.ForeignKey(MessageType, on_delete=models.CASCADE, related_name="subscriptions")
    scope = models.CharField(max_length=100)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="mc_subscriptions"
    )
    group = models.ForeignKey(UserGroup, null=True, blank=True, on_delete=models.CASCADE, related_name="subscriptions")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["message_type", "scope", "id"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(user__isnull=False, group__isnull=True) | models.Q(user__isnull=True, group__isnull=False)
                ),
                name="mc_subscription_one_subscriber",
                violation_error_message="Choose exactly one of user or group.",
            ),
            # Both unique constraints lead with (message_type, scope): they also
            # serve the send-time lookup of a (type, scope)'s subscribers.
            models.UniqueConstraint(
                fields=["message_type", "scope", "user"],
                condition=models.Q(user__isnull=False),
                name="mc_subscription_user_unique",
            ),
            models.UniqueConstraint(
                fields=["message_type", "scope", "group"],
                condition=models.Q(group__isnull=False),
                name="mc_subscription_group_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.message_type_id}/{self.scope} -> {self.subscriber}"

    @property
    def subscriber(self) -> str:
        """Member of the Redis subscriber set: ``u<id>`` or ``g<id>``."""
        return f"u{self.user_id}" if self.user_id else f"g{self.group_id}"


class NotificationStatus(models.TextChoices):
    """Where a notification stands: not a column but ``Notification.status``,
    read off ``scheduled``, ``withdrawn`` and its slot."""

    # Waiting for send_at: stored, reaching nobody yet.
    SCHEDULED = "scheduled", "Scheduled"
    SENT = "sent", "Sent"
    # A scheduled notification cancelled before its time: it never reached anyone.
    CANCELLED = "cancelled", "Cancelled (never sent)"
    # Sent, then taken back out of every inbox.
    WITHDRAWN = "withdrawn", "Withdrawn"


class Notification(models.Model):
    """One typed notification for a scope: the durable truth the Redis inboxes
    are rebuilt from. The send-time audience is a roaring bitmap, never rows."""

    message_type = models.ForeignKey(MessageType, on_delete=models.PROTECT, related_name="notifications")
    scope = models.CharField(max_length=100)
    # Copied from the type at send time: the inbox member carries it, so a later
    # change of the type's category must not orphan delivered items.
    category = models.CharField(max_length=16, choices=Category.choices, editable=False)
    title = models.CharField(max_length=200)
    body_html = models.TextField(blank=True)
    created_at = models.DateTimeField()
    expire_at = models.DateTimeField()
    recipients = models.PositiveIntegerField(default=0)
    audience_bitmap = models.BinaryField(default=bytes, blank=True, editable=False)
    # What raised it: a rule (and the matching object), or any object a caller names.
    rule = models.ForeignKey(
        "NotificationRule", null=True, blank=True, on_delete=models.SET_NULL, related_name="notifications"
    )
    source_type = models.ForeignKey(
        "contenttypes.ContentType", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    source_id = models.CharField(max_length=64, blank=True)
    withdrawn = models.BooleanField(default=False)
    withdrawn_at = models.DateTimeField(null=True, blank=True)
    # Waiting for send_at: no audience, no slot (month 0), nothing in Redis. A
    # cancelled one is withdrawn and no longer scheduled.
    scheduled = models.BooleanField(default=False)
    send_at = models.DateTimeField(null=True, blank=True)
    # Grouping (messagecenter.services.grouping): items of one key collapse
    # into one row of each recipient's inbox while the group is unread; the
    # actor is the display name its row lists ("Ann, Ben and 2 others").
    group_key = models.CharField(max_length=100, blank=True, default="")
    actor = models.CharField(max_length=100, blank=True, default="")
    # Set once the sweep freed the stored-once detail after expiry.
    details_freed = models.BooleanField(default=False, editable=False)
    slot_month = models.PositiveIntegerField(editable=False)
    slot_offset = models.BigIntegerField(editable=False)
    translations = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # Bitmap entries of first reads name items by slot (readmodel/reads.py).
            models.Index(fields=["slot_month", "slot_offset"], name="mc_notification_slot_idx"),
            # Admin list (newest first).
            models.Index(fields=["-created_at"], name="mc_notification_created_idx"),
            # The scheduled-send job: scheduled notifications whose send_at has passed.
            models.Index(fields=["send_at"], condition=models.Q(scheduled=True), name="mc_notification_sched_idx"),
            # Retention: the oldest item of a group key (ends older than it go).
            models.Index(
                fields=["group_key", "created_at"], condition=~models.Q(group_key=""), name="mc_notification_group_idx"
            ),
            # notification_sweep(): expired notifications whose detail is still stored.
            models.Index(
                fields=["expire_at"], condition=models.Q(details_freed=False), name="mc_notification_expire_idx"
            ),
        ]

    def __str__(self) -> str:
        return self.title

    @property
    def ref(self) -> str:
        return f"n{self.pk}"

    @property
    def audience(self) -> BitMap:
        return BitMap.deserialize(bytes(self.audience_bitmap)) if self.audience_bitmap else BitMap()

    @property
    def status(self) -> str:
        if self.scheduled:
            return NotificationStatus.SCHEDULED.value
        if self.withdrawn:
            # Only a send allocates a slot: withdrawn without one was cancelled while scheduled.
            return NotificationStatus.CANCELLED.value if self.slot_month == 0 else NotificationStatus.WITHDRAWN.value
        return NotificationStatus.SENT.value


class NotificationRecipient(Recipient):
    """A user a notification was fanned out to: the fill's index of a user's
    notifications, written by each fan-out chunk before its Redis write (as
    ``MessageRecipient``). Notifications are pushed to every subscriber, so
    Redis holds an entry per recipient already; this is its durable twin."""

    pk = models.CompositePrimaryKey("user_id", "notification_id")
    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="recipient_rows")

    def __str__(self) -> str:
        return f"{self.user_id}: n{self.notification_id}"


class NotificationRule(models.Model):
    """A configurable business rule: scan a table on a schedule and
    notify once per matching object, withdrawing when it stops matching."""

    name = models.CharField(max_length=100)
    content_type = models.ForeignKey("contenttypes.ContentType", on_delete=models.CASCADE, related_name="+")
    # Field lookups only, e.g. {"quantity__lt": 0}; validated against the model on save.
    filters = models.JSONField(default=dict, blank=True)
    message_type = models.ForeignKey(MessageType, on_delete=models.PROTECT, related_name="rules")
    scope = models.CharField(max_length=100, blank=True, help_text="Fixed scope, or leave blank and name a field.")
    scope_field = models.CharField(max_length=100, blank=True, help_text="Field of the object holding the scope.")
    title_template = models.CharField(max_length=500)
    body_template = models.TextField(blank=True)
    ttl_seconds = models.PositiveIntegerField(null=True, blank=True, help_text="Blank: the message type's TTL.")
    interval_seconds = models.PositiveIntegerField(default=300)
    enabled = models.BooleanField(default=True)
    last_run_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]
        indexes = [
            # rules_run_due(): enabled rules, oldest run first.
            models.Index(fields=["enabled", "last_run_at"], name="mc_rule_due_idx"),
        ]

    def __str__(self) -> str:
        return self.name


class RuleMatch(models.Model):
    """An object currently matching a rule, and the notification it raised."""

    rule = models.ForeignKey(NotificationRule, on_delete=models.CASCADE, related_name="matches")
    object_pk = models.CharField(max_length=64)
    notification = models.ForeignKey(Notification, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # Also serves "the current matches of a rule" (rule_id prefix).
            models.UniqueConstraint(fields=["rule", "object_pk"], name="mc_rulematch_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.rule_id}:{self.object_pk}"


class RuleRun(models.Model):
    """One run of a rule: what it found and did, or the error that stopped it."""

    rule = models.ForeignKey(NotificationRule, on_delete=models.CASCADE, related_name="runs")
    started_at = models.DateTimeField()
    matches = models.PositiveIntegerField(default=0)
    sent = models.PositiveIntegerField(default=0)
    withdrawn = models.PositiveIntegerField(default=0)
    errors = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [
            # Run history of one rule, newest first (admin inline).
            models.Index(fields=["rule", "-started_at"], name="mc_rulerun_rule_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.rule_id} @ {self.started_at:%Y-%m-%d %H:%M:%S}"


class StockLevel(models.Model):
    """DEMO ONLY: a stand-in business table (warehouse stock) so the
    demo rule "negative stock at a location means replenish" has rows to scan.
    Real projects point rules at their own models."""

    warehouse = models.CharField(max_length=32)
    location = models.CharField(max_length=32)
    sku = models.CharField(max_length=64)
    quantity = models.IntegerField(default=0)

    class Meta:
        ordering = ["warehouse", "location", "sku"]
        constraints = [
            models.UniqueConstraint(fields=["warehouse", "location", "sku"], name="mc_stocklevel_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.warehouse}/{self.location}/{self.sku}: {self.quantity}"


# --- The user's own preferences ------------------------------------------------


class EmailDigest(models.TextChoices):
    OFF = "off", _("Off")
    DAILY = "daily", _("Daily")
    WEEKLY = "weekly", _("Weekly")


class UserPreferences(models.Model):
    """What a user chose for themselves beyond mutes (kept as ``MutePeriod`` rows)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True, related_name="mc_preferences"
    )
    # Blank: the user never chose, and gets MESSAGECENTER_DIGEST_DEFAULT as it is
    # now (a row also exists for mutes, or to record digest sends), so the
    # operator's default keeps reaching exactly the users who never chose.
    email_digest = models.CharField(max_length=8, choices=EmailDigest.choices, blank=True, default="")
    # When the last digest was claimed for sending (services/digests.py): a
    # conditional UPDATE on it lets one run, and only one, send per period.
    last_digest_at = models.DateTimeField(null=True, blank=True)
    # Per category, what the user changed from the channel defaults
    # (messagecenter.channel_prefs): {"system": {"email": "digest", "web_push": false}}.
    # Only choices are kept, so a later change of a default reaches everyone else.
    channels = models.JSONField(default=dict, blank=True)
    # Quiet hours in the user's own time zone (both times set, or neither); may span midnight.
    quiet_start = models.TimeField(null=True, blank=True)
    quiet_end = models.TimeField(null=True, blank=True)
    quiet_timezone = models.CharField(max_length=64, blank=True)
    # A code of settings.LANGUAGES; blank: none chosen (the request's language applies).
    language = models.CharField(max_length=16, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "user preferences"
        indexes = [
            # The digest run's due query: email_digest IN (daily, weekly), and
            # blank (never chose) while the default is on, by user id.
            models.Index(
                fields=["user"],
                name="mc_prefs_digest_on_idx",
                condition=models.Q(email_digest__in=["", "daily", "weekly"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user_id} preferences"


class MutePeriod(models.Model):
    """A span of time during which a user muted a category or a message type.

    An item is hidden from a user exactly when its time on the inbox axis
    (creation, or a bulletin's display time, in ms) falls in
    ``(start_ms, end_ms]`` of a period of its category or, for a
    notification, of its message type (``end_ms`` null: still muted; the
    bounds are explained in ``messagecenter.mutes``). The
    rule depends on the item's time alone, never on when a delivery or a
    merge ran, so every path (push, merge on read, rebuild, the PostgreSQL
    fallback) decides alike, and unmuting brings nothing back.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mc_mute_periods")
    category = models.CharField(max_length=16, choices=Category.choices, blank=True)
    message_type = models.ForeignKey(
        MessageType, null=True, blank=True, on_delete=models.CASCADE, related_name="mute_periods"
    )
    start_ms = models.BigIntegerField()
    end_ms = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["user", "start_ms", "id"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    (models.Q(category="") & models.Q(message_type__isnull=False))
                    | (~models.Q(category="") & models.Q(message_type__isnull=True))
                ),
                name="mc_muteperiod_one_target",
                violation_error_message="Mute exactly one of a category or a message type.",
            ),
            # At most one open period per target; also serves "what does this user mute now".
            models.UniqueConstraint(
                fields=["user", "category"],
                condition=models.Q(end_ms__isnull=True, message_type__isnull=True),
                name="mc_muteperiod_open_category",
            ),
            models.UniqueConstraint(
                fields=["user", "message_type"],
                condition=models.Q(end_ms__isnull=True, message_type__isnull=False),
                name="mc_muteperiod_open_type",
            ),
        ]
        indexes = [
            # Delivery's lookup of muted recipients among a chunk (user_id IN ...), and one user's periods.
            models.Index(fields=["user", "start_ms"], name="mc_muteperiod_user_idx"),
        ]

    def __str__(self) -> str:
        target = self.category or f"type {self.message_type_id}"
        return f"{self.user_id} muted {target} [{self.start_ms}, {self.end_ms or ''})"


# --- Channels beyond the inbox: Web Push and e-mail ----------------------------


class PushSubscription(models.Model):
    """One browser's Web Push subscription (``PushSubscription.toJSON()``): where
    to POST and the keys to encrypt for (RFC 8291). A device is an endpoint."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mc_push_subscriptions")
    endpoint = models.URLField(max_length=2000)
    # The browser's P-256 public key (uncompressed point) and auth secret, base64url as sent.
    p256dh = models.CharField(max_length=100)
    auth = models.CharField(max_length=32)
    user_agent = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # One row per endpoint: a browser subscribing again finds its row.
            models.UniqueConstraint(fields=["endpoint"], name="mc_pushsub_endpoint_unique"),
        ]
        indexes = [
            # A user's devices (the API's list, the settings page) and the push
            # fan-out's lookup of a chunk's recipients (user_id = ANY(...)).
            models.Index(fields=["user", "-created_at"], name="mc_pushsub_user_idx"),
        ]

    def __str__(self) -> str:
        return f"push subscription {self.pk} of {self.user_id}"


class ItemChannels(models.Model):
    """What an operator asked of the channels for one message or notification,
    and what they did: one row per item, never one per recipient.

    The e-mail scan walks the item's audience in user-id order after
    ``email_due_at``; ``email_after_user`` is how far it got, moved by a
    conditional UPDATE before the batch's e-mails go out, so a batch is
    claimed once and a user gets at most one e-mail about the item."""

    item_id = models.CharField(max_length=40, unique=True)  # the inbox ref: "m12", "n7"
    category = models.CharField(max_length=16, choices=Category.choices)
    web_push = models.BooleanField(default=False)
    email_after_seconds = models.PositiveIntegerField(null=True, blank=True)
    # Null while the item is not sent (scheduled) or wants no e-mail.
    email_due_at = models.DateTimeField(null=True, blank=True)
    email_after_user = models.BigIntegerField(default=0)
    email_done = models.BooleanField(default=False)
    push_sent = models.PositiveIntegerField(default=0)
    push_failed = models.PositiveIntegerField(default=0)
    email_sent = models.PositiveIntegerField(default=0)
    email_skipped_read = models.PositiveIntegerField(default=0)
    email_deferred = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "item channels"
        indexes = [
            # The e-mail scan: items whose delay has passed and whose scan is not finished.
            models.Index(fields=["email_due_at"], condition=models.Q(email_done=False), name="mc_channels_due_idx"),
            # The quiet-hours release: items sent while a user's hours were on.
            models.Index(fields=["created_at"], name="mc_channels_created_idx"),
        ]

    def __str__(self) -> str:
        return f"channels of {self.item_id}"


class PushDelivery(DeliveryAttempts):
    """A push that failed and waits for its next attempt: the webhooks' shape
    (``webhooks.services``: status, attempts, ``next_attempt_at`` leased and relayed
    by beat, retried after ``WEBHOOK_RETRY_DELAYS``). First attempts need no
    row; only a failure that may pass is written down."""

    subscription = models.ForeignKey(PushSubscription, on_delete=models.CASCADE, related_name="deliveries")
    item_id = models.CharField(max_length=40)
    payload = models.JSONField(default=dict)
    status = models.CharField(max_length=16, default="pending")  # webhooks.models.WebhookDeliveryStatus values

    class Meta:
        verbose_name_plural = "push deliveries"
        indexes = [
            # The relay: pending rows that are due, oldest first.
            models.Index(
                fields=["next_attempt_at"], condition=models.Q(status="pending"), name="mc_pushdelivery_due_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"push of {self.item_id} to {self.subscription_id} ({self.status})"


class ChannelHold(models.Model):
    """A user whose quiet hours held a push or an e-mail: one row per user,
    whatever was held. When ``until`` passes, the release finds what was held
    from the items themselves (sent, or due by e-mail, since ``since``) and
    sends one summary push and one e-mail of what is still unread."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True, related_name="mc_channel_hold"
    )
    since = models.DateTimeField()
    until = models.DateTimeField()

    class Meta:
        indexes = [
            # The release: holds whose quiet hours are over.
            models.Index(fields=["until"], name="mc_channelhold_until_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id} held until {self.until:%Y-%m-%d %H:%M}"
