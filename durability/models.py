"""The durability app's tables. They were core's and kept their names (``core_*``)
when the app took them over: the move changed Django's state, not the database."""

from django.db import models


class OutboxEntry(models.Model):
    """A read-model write that could not reach Redis after PostgreSQL committed.

    Replayed in id order (``durability.outbox``) once Redis answers again; every
    handler is idempotent, so a replay that dies half-way is simply run again.
    What a user's write left for Redis carries ``user_id`` (the write itself
    is committed already): the user's later writes queue behind it.
    """

    topic = models.CharField(max_length=64)
    payload = models.JSONField(default=dict)
    user_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Not replayed before this time (None: at once): an entry a process writes
    # in its transaction and deletes itself after its commit, unless it died.
    due_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)

    class Meta:
        db_table = "core_outboxentry"
        ordering = ["id"]
        indexes = [
            # A user's mark: are older writes of theirs still waiting for Redis?
            models.Index(fields=["user_id", "id"], condition=models.Q(user_id__isnull=False), name="outbox_user_idx"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.topic}"


class RedisCheckRun(models.Model):
    """One run of ``check_redis`` (by hand or by the beat job): what drifted, what was mended."""

    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    repair = models.BooleanField(default=False)
    drift_count = models.PositiveIntegerField(default=0)
    repaired_count = models.PositiveIntegerField(default=0)
    # [{"area": "announcements", "key": "...", "detail": "..."}, ...]
    findings = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        db_table = "core_redischeckrun"
        ordering = ["-started_at", "-id"]
        indexes = [
            # The admin's "last result" and the run history, newest first.
            models.Index(fields=["-started_at"], name="redischeckrun_started_idx"),
        ]

    def __str__(self) -> str:
        return f"check {self.started_at:%Y-%m-%d %H:%M:%S}: {self.drift_count} drift"


class ReadModelState(models.Model):
    """The one row (pk 1) describing the Redis read model as a whole (``durability.healing``).

    ``generation`` moves on at the end of every full rebuild; the same number
    goes into Redis (``durability.keys.readmodel_generation``), so a Redis without it
    (lost data) or with another one (a stale replica) is told apart from the
    one PostgreSQL last filled. The other fields tell whether a rebuild runs,
    since when, and how the last one ended. (It restores only what users
    share, whose time grows with the live items, not the users: /healthz
    shows since when it runs, and no progress is kept.)
    """

    generation = models.BigIntegerField(default=0)
    rebuilding = models.BooleanField(default=False)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_seconds = models.FloatField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        db_table = "core_readmodelstate"

    def __str__(self) -> str:
        return f"read model generation {self.generation}"
