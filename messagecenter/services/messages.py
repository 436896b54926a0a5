"""Messages: composed by operators, delivered by push (write fan-out) to small
audiences and by pull (stored once, merged on read) to large ones and to
everyone. Either way the user sees the same inbox (docs/ARCHITECTURE.md)."""

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.postgres.aggregates import ArrayAgg
from django.core.files.uploadedfile import UploadedFile
from django.db import connections, router, transaction
from django.utils import timezone
from pyroaring import BitMap
from redis.exceptions import RedisError

from core.api.errors import LimitExceeded, ValidationFailed
from core.api.lookups import Whole
from core.api.translations import translations_validate
from core.html import sanitize_html, summarize
from live import transport as live
from messagecenter import projection
from messagecenter.items import message_detail, message_entry
from messagecenter.models import (
    CATEGORIES,
    DeliveryMode,
    FanoutChunk,
    Message,
    MessageImage,
    MessageStatus,
    UserGroup,
    UserGroupMembership,
)
from messagecenter.readmodel import publish
from messagecenter.services.channels.plan import ChannelRequest, channels_plan
from messagecenter.services.delivery import Job, delivery_add, delivery_done_with
from messagecenter.services.grouping import group_fields_clean, group_item_removed
from messagecenter.services.inbox import inbox_deliver, inbox_publish_pull
from messagecenter.services.recipients import recipients_add
from messagecenter.services.responses import actions_validate
from messagecenter.services.slots import slot_allocate
from webhooks import services as webhooks


def _recipients_known(*, wanted_users: BitMap, wanted_groups: set[int]) -> list[UserGroup]:
    """The wanted groups' rows; any unknown user or group id is one 400 naming
    them all (users and groups both), so the operator fixes the list at once."""
    errors: dict[str, list[str]] = {}
    if wanted_users:
        found = BitMap(get_user_model().objects.filter(pk__any_of=Whole(wanted_users)).values_list("pk", flat=True))
        missing = wanted_users - found
        if missing:
            errors["users"] = [f"Unknown user id(s): {', '.join(map(str, missing))}."]
    # No groups (everyone, explicit users): no query to compile either.
    groups = list(UserGroup.objects.filter(pk__in=wanted_groups)) if wanted_groups else []
    missing_groups = sorted(wanted_groups - {g.pk for g in groups})
    if missing_groups:
        errors["groups"] = [f"Unknown group id(s): {', '.join(map(str, missing_groups))}."]
    if errors:
        raise ValidationFailed("Unknown recipients.", code="unknown_recipients", fields={"to": errors})
    return groups


def _resolve(
    *, user_ids: Iterable[int], group_ids: Iterable[int], everyone: bool
) -> tuple[BitMap, BitMap, list[UserGroup]]:
    """(explicit users, send-time audience, groups); unknown ids raise naming them."""
    wanted_users = BitMap(int(u) for u in user_ids)
    groups = _recipients_known(wanted_users=wanted_users, wanted_groups={int(g) for g in group_ids})
    if not (wanted_users or groups or everyone):
        raise ValidationFailed(
            "Choose users, groups or everyone.", fields={"to": ["Choose users, groups or everyone."]}
        )
    audience = BitMap(wanted_users)
    if groups and not everyone:
        audience |= _members(groups)
    if audience and audience.max() > int(settings.MESSAGECENTER_MAX_USER_ID):
        raise LimitExceeded("A user id is beyond MESSAGECENTER_MAX_USER_ID; bitmaps cannot address it.")
    return wanted_users, (BitMap() if everyone else audience), groups


def _members(groups: Sequence[UserGroup]) -> BitMap:
    """The members of these groups (a bitmap: a user in two groups counts once).

    On PostgreSQL one array_agg value (mc_membership_unique's (group, user)
    index serves the filter): a 10,000-member group comes back as one array,
    not as 10,000 rows for Django to iterate one by one (about 5 ms against
    16 per send); no DISTINCT either, the bitmap drops duplicates.
    """
    members = UserGroupMembership.objects.filter(group__in=groups)
    if connections[router.db_for_read(UserGroupMembership)].vendor == "postgresql":
        ids = members.aggregate(ids=ArrayAgg("user_id", default=[]))["ids"]
        return BitMap(ids)
    return BitMap(members.values_list("user_id", flat=True))


def message_audience_preview(
    *, user_ids: Iterable[int] = (), group_ids: Iterable[int] = (), everyone: bool = False
) -> int | None:
    """How many users a message would reach now (None for everyone)."""
    _users, audience, _groups = _resolve(user_ids=user_ids, group_ids=group_ids, everyone=everyone)
    return None if everyone else len(audience)


MAX_AHEAD = timedelta(days=365)


def send_at_check(send_at: datetime, *, now: datetime | None = None) -> datetime:
    """A send_at in the future and at most a year ahead; otherwise a 400 on ``send_at``."""
    now = now or timezone.now()
    if send_at <= now:
        raise ValidationFailed("send_at must be in the future.", fields={"send_at": ["Must be in the future."]})
    if send_at > now + MAX_AHEAD:
        raise ValidationFailed(
            "send_at must be at most a year ahead.", fields={"send_at": ["Must be at most a year ahead."]}
        )
    return send_at


def delivery_mode(*, everyone: bool, size: int) -> str:
    """Push to at most MESSAGECENTER_PUSH_THRESHOLD users, pull above and for everyone."""
    threshold = int(settings.MESSAGECENTER_PUSH_THRESHOLD)
    return DeliveryMode.PULL if everyone or size > threshold else DeliveryMode.PUSH


def _send_check(*, category: str, send_at: datetime | None, expire_at: datetime | None, now: datetime) -> None:
    """The category is known, send_at lies ahead and expire_at after the
    moment the message goes out (send_at, or now); otherwise a 400 naming the field."""
    if category not in CATEGORIES:
        raise ValidationFailed(f"Unknown category {category!r}.", fields={"category": ["Unknown category."]})
    if send_at is not None:
        send_at_check(send_at, now=now)
        if expire_at is not None and expire_at <= send_at:
            raise ValidationFailed("expire_at must be after send_at.", fields={"expire_at": ["Must be after send_at."]})
    elif expire_at is not None and expire_at <= now:
        raise ValidationFailed("expire_at must be in the future.", fields={"expire_at": ["Must be in the future."]})


def _audience_fields(*, explicit: BitMap, audience: BitMap, everyone: bool, scheduled: bool) -> dict[str, Any]:
    """The new row's audience, delivery and status fields. A scheduled message
    keeps its explicit users only: its audience is resolved again when it is
    sent, so no audience bitmap and no fan-out yet."""
    return {
        "everyone": everyone,
        "users_bitmap": explicit.serialize() if explicit else b"",
        "audience_bitmap": audience.serialize() if audience and not scheduled else b"",
        "audience_size": None if everyone else len(audience),
        "delivery": delivery_mode(everyone=everyone, size=len(audience)),
        "fanout_total": 0 if everyone or scheduled else len(audience),
        "status": MessageStatus.SCHEDULED if scheduled else MessageStatus.QUEUED,
    }


def message_send(  # noqa: PLR0913  one keyword per field an operator composes, as the API and admin pass them
    *,
    sender: AbstractBaseUser | None,
    category: str,
    title: str,
    body_html: str,
    summary: str = "",
    link: str = "",
    images: Sequence[str] = (),
    image_files: Sequence[UploadedFile] = (),
    user_ids: Iterable[int] = (),
    group_ids: Iterable[int] = (),
    everyone: bool = False,
    expire_at: datetime | None = None,
    send_at: datetime | None = None,
    channels: ChannelRequest | None = None,
    actions: Sequence[Mapping[str, Any]] | None = None,
    translations: Mapping[str, Any] | None = None,
    group_key: str = "",
    actor: str = "",
) -> Message:
    """Store a message and its audience, then deliver it after commit; with
    ``send_at``, store it to be sent then (status ``scheduled``). ``channels``:
    what it asks of Web Push and e-mail (``services.channels``), started with
    the send.

    The audience is resolved now (explicit users plus the groups' members),
    kept as a roaring bitmap; "everyone" stays a flag. Push when it is at
    most MESSAGECENTER_PUSH_THRESHOLD users, pull above and for everyone.
    A scheduled message reaches nobody yet: no slot (month 0), no audience
    bitmap, no pending delivery, no ``message.sent``; its recipients are
    checked now (unknown ones are a 400) and resolved again when it is sent
    (``services.scheduled``), which decides ``delivery`` and ``audience_size`` anew.
    """
    now = timezone.now()
    _send_check(category=category, send_at=send_at, expire_at=expire_at, now=now)
    group_key, actor = group_fields_clean(group_key=group_key, actor=actor)
    explicit, audience, groups = _resolve(user_ids=user_ids, group_ids=group_ids, everyone=everyone)
    offered = actions_validate(list(actions)) if actions is not None else []
    localized = translations_validate(translations) if translations is not None else {}
    body = sanitize_html(body_html)
    scheduled = send_at is not None
    # No savepoint: nothing inside is caught, so an error aborts the
    # caller's transaction as a whole (a publish is all or nothing either way).
    with transaction.atomic(savepoint=False):
        month, offset = (0, 0) if scheduled else slot_allocate(at=now)
        message = Message.objects.create(
            category=category,
            title=title,
            summary=summary or summarize(body),
            body_html=body,
            link=link,
            images=list(images),
            sender=sender if sender is not None and sender.is_authenticated else None,  # type: ignore[misc]
            created_at=send_at or now,
            send_at=send_at,
            expire_at=expire_at,
            slot_month=month,
            slot_offset=offset,
            actions=offered,
            translations=localized,
            group_key=group_key,
            actor=actor,
            **_audience_fields(explicit=explicit, audience=audience, everyone=everyone, scheduled=scheduled),
        )
        if groups:  # a new message has none: skip the SELECT of set()
            message.groups.set(groups)
        uploaded = [
            MessageImage.objects.create(message=message, file=upload, position=position)
            for position, upload in enumerate(image_files)
        ]
        if not scheduled:
            _deliver_on_commit(message, uploaded)
            message_sent_emit(message)
        if channels is not None:
            channels_plan(
                item_id=message.ref,
                category=category,
                request=channels,
                created_at=message.created_at,
                sent=not scheduled,
            )
    return message


def message_sent_emit(message: Message) -> None:
    """The ``message.sent`` webhook event, in the transaction that sends it."""
    webhooks.webhook_emit(
        event="message.sent",
        data={
            "id": str(message.pk),
            "category": message.category,
            "title": message.title,
            "delivery": message.delivery,
            "recipients": message.audience_size,
            "everyone": message.everyone,
        },
    )


DELIVER_TASK = "messagecenter.message_deliver"
FANOUT_CHUNK_TASK = "messagecenter.message_fanout_chunk"


def _deliver_on_commit(message: Message, uploaded: list[MessageImage]) -> None:
    """Record the delivery in the send's transaction; after commit it goes to
    its task (``services.delivery``). When Celery runs tasks in this process
    anyway (CELERY_TASK_ALWAYS_EAGER, the default without a broker), deliver
    the message at hand instead of reloading it through the task.

    Still correct if the transaction changed the message after this point:
    every later save, retraction, image change or delete asks for its own
    projection after commit, which runs after this one and reloads the row.
    """
    delivery_add(
        task=DELIVER_TASK,
        object_id=message.pk,
        # The image rows are exactly those created above: the detail lists
        # them as given instead of selecting them again.
        first=lambda: message_deliver(message=message, image_files=uploaded),
    )


def message_deliver_job(message_id: int, _index: int) -> int:
    """A pending delivery's row: reload the message and deliver it (0 when gone)."""
    message = Message.objects.filter(pk=message_id).first()
    return 0 if message is None else message_deliver(message=message)


def message_fanout_chunk_job(message_id: int, index: int) -> int:
    """A pending chunk's row: reload the message and push the chunk (0 when gone)."""
    message = Message.objects.filter(pk=message_id).first()
    return 0 if message is None else message_fanout_chunk(message=message, index=index)


# What runs each task's pending rows (registered with services.delivery): task -> (job, takes an index).
DELIVERY_JOBS: dict[str, tuple[Job, bool]] = {
    DELIVER_TASK: (message_deliver_job, False),
    FANOUT_CHUNK_TASK: (message_fanout_chunk_job, True),
}


def _chunk_count(message: Message) -> int:
    return math.ceil((message.audience_size or 0) / int(settings.MESSAGECENTER_FANOUT_CHUNK))


def _undo_if_retracted(message: Message) -> None:
    """A retraction that committed while this task was writing: its removal
    may have run before our write, so remove again (idempotent) after it."""
    if Message.objects.filter(pk=message.pk, status=MessageStatus.RETRACTED).exists():
        _remove_everywhere(message)


def _remove_everywhere(message: Message) -> None:
    entry = message_entry(message)
    pull = message.delivery == DeliveryMode.PULL
    publish.item_remove(entry=entry, pull_member=publish.pull_member(entry, everyone=message.everyone) if pull else "")


# The status write of a pull delivery, in its own transaction (we run after
# the send's commit) that does not wait for its WAL flush: a commit's flush
# costs ~0.7 ms here, as much as the rest of an everyone-message's delivery.
# It only records what Redis already holds, so losing it (a PostgreSQL crash
# within wal_writer_delay) is what a process dying between the Redis write and
# this UPDATE already is: the message stays queued and its delivery, which is
# idempotent, can run again. set_config(..., true) applies to the current
# transaction, here this one statement's (which also deletes the delivery's
# pending row: delivery_done_with); nothing else is written this way.
_PULL_DELIVERED_SQL = """
    UPDATE {table} SET status = %s
    WHERE id = %s AND status = %s AND set_config('synchronous_commit', 'off', true) IS NOT NULL
"""


def _mark_pulled_delivered(message: Message) -> bool:
    """QUEUED -> DELIVERED after the pull registration, with the deletion of
    the delivery's pending row in the same statement; False when the row was
    not queued."""
    connection = connections[router.db_for_write(Message)]
    updated = delivery_done_with(
        task=DELIVER_TASK,
        object_id=message.pk,
        statement=_PULL_DELIVERED_SQL.format(table=connection.ops.quote_name(Message._meta.db_table)),
        params=[MessageStatus.DELIVERED, message.pk, MessageStatus.QUEUED],
    )
    if updated is not None:
        return bool(updated)
    # SQLite (the embedded default), or inside a caller's transaction, whose commit decides.
    return bool(
        Message.objects.filter(pk=message.pk, status=MessageStatus.QUEUED).update(status=MessageStatus.DELIVERED)
    )


def message_deliver(*, message: Message, image_files: Sequence[MessageImage] | None = None) -> int:
    """Publish a stored message: its detail, then pull registration or push
    chunk tasks. Idempotent. Returns the number of chunks to fan out.
    ``image_files``: the message's image rows when the caller holds them all
    (None: the detail loads them)."""
    if message.status == MessageStatus.RETRACTED:
        return 0
    detail = message_detail(message, image_files=image_files)
    entry = message_entry(message)
    if message.delivery == DeliveryMode.PULL:
        # Stored once, merged on read: open pages hear of it on the shared
        # channel, from the registering script itself (a rerun registers
        # nothing and tells nobody again).
        inbox_publish_pull(
            entry=entry,
            detail=detail,
            audience=None if message.everyone else message.audience,
            announce=live.broadcast_parts(scope=live.BROADCAST_EVERYONE, reason="pull", ref=entry.ref),
        )
        # The row is locked by this UPDATE: a retraction that commits later
        # removes the item after our write. Only when it did not match (a
        # rerun, or retracted meanwhile) can a removal have gone first.
        if not _mark_pulled_delivered(message):
            _undo_if_retracted(message)
        return 0
    publish.item_detail_put(ref=entry.ref, detail=detail)
    chunks = _chunk_count(message)
    if chunks == 0:
        Message.objects.filter(pk=message.pk, status=MessageStatus.QUEUED).update(status=MessageStatus.DELIVERED)
        return 0
    started = Message.objects.filter(pk=message.pk, status=MessageStatus.QUEUED).update(status=MessageStatus.DELIVERING)
    # Chunks are sent only after that UPDATE: when it found the row still
    # queued (a first run) none can be done yet; only a rerun looks them up.
    done = set(FanoutChunk.objects.filter(message=message).values_list("index", flat=True)) if not started else set()
    todo = [index for index in range(chunks) if index not in done]
    if not current_app.conf.task_always_eager:
        # One pending row per chunk, committed before this delivery's own row
        # is deleted, then handed to the chunk tasks.
        delivery_add(task=FANOUT_CHUNK_TASK, object_id=message.pk, indexes=todo)
        return chunks
    # Celery runs tasks in this process anyway (CELERY_TASK_ALWAYS_EAGER, the
    # default without a broker), one after another, and each chunk task
    # would only reload this message: push all the chunks of the message at
    # hand in one stream of deliver.lua calls, then record them in one
    # transaction (one commit, not one per chunk). On a Redis error every
    # chunk becomes a pending row that goes to its task after commit and
    # stays pending while Redis fails (the writes are idempotent; a chunk
    # pushed before the error is pushed again without effect).
    with transaction.atomic(savepoint=False):
        try:
            _fanout(message, todo)
        except RedisError:
            delivery_add(task=FANOUT_CHUNK_TASK, object_id=message.pk, indexes=todo)
    return chunks


def message_fanout_chunk(*, message: Message, index: int) -> int:
    """Push one chunk of the audience (pipelined). Running it twice changes
    nothing (ZADD NX, one FanoutChunk row per index). Returns users pushed."""
    return _fanout(message, [index])


def _fanout(message: Message, indexes: Sequence[int]) -> int:
    """Push these chunks of the audience (one stream of deliver.lua calls),
    then record them and, after our write, read the status: a retraction that
    committed meanwhile may have removed the item before we wrote it."""
    if message.status == MessageStatus.RETRACTED or not indexes:
        return 0
    size = int(settings.MESSAGECENTER_FANOUT_CHUNK)
    audience = message.audience
    chunks = [(index, list(audience[index * size : (index + 1) * size])) for index in indexes]
    recipients = [u for _, user_ids in chunks for u in user_ids]
    recipients_add(item=message, user_ids=recipients)  # PostgreSQL first: a user's fill finds it by these
    inbox_deliver(entry=message_entry(message), user_ids=recipients)
    status, done = _chunks_record(message=message, sizes=[(index, len(user_ids)) for index, user_ids in chunks])
    if status == MessageStatus.RETRACTED:
        message.status = MessageStatus.RETRACTED  # the message at hand learns it too
        _remove_everywhere(message)
    elif done >= _chunk_count(message):
        Message.objects.filter(pk=message.pk, status=MessageStatus.DELIVERING).update(status=MessageStatus.DELIVERED)
    return sum(len(user_ids) for _, user_ids in chunks)


# Table and columns are FanoutChunk's and Message's (tests/messagecenter/
# test_fanout_paths.py holds them to the models); plain SQL for PostgreSQL
# and SQLite alike.
_CHUNK_INSERT_SQL = """
    INSERT INTO messagecenter_fanoutchunk (message_id, "index", size, done_at) VALUES {rows}
    ON CONFLICT (message_id, "index") DO NOTHING
"""
_CHUNK_ROW = "(%s, %s, %s, %s)"
_CHUNK_PROGRESS_SQL = """
    SELECT status, (SELECT COUNT(*) FROM messagecenter_fanoutchunk WHERE message_id = %s)
    FROM messagecenter_message WHERE id = %s
"""


def _chunks_record(*, message: Message, sizes: Sequence[tuple[int, int]]) -> tuple[str, int]:
    """Record pushed chunks ((index, size) each), then read the message's
    status and how many chunks are done: plain statements, after the Redis write.

    The INSERT ... ON CONFLICT DO NOTHING (mc_fanoutchunk_unique) keeps the
    first row on a rerun. Outside a transaction (a Celery task) the INSERT
    commits before the SELECT starts, so of two last chunks finishing at once
    on two workers the later SELECT sees both rows; one statement or one
    transaction for both would let each miss the other and leave the message
    delivering. (Eager Celery records all chunks of a message at once, in one
    transaction: nothing else is pushing them.)

    Plain SQL: this runs for every chunk of every fan-out, and bulk_create
    (BEGIN, INSERT, COMMIT) plus an annotated query cost about 2 ms of
    Django's own time per chunk, against 0.5 ms for the two statements.
    """
    connection = connections[router.db_for_write(FanoutChunk)]
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    with connection.cursor() as cursor:
        # One statement for all the rows (only placeholders are formatted in).
        insert = _CHUNK_INSERT_SQL.format(rows=", ".join([_CHUNK_ROW] * len(sizes)))
        cursor.execute(insert, [value for index, size in sizes for value in (message.pk, index, size, now)])
        cursor.execute(_CHUNK_PROGRESS_SQL, [message.pk, message.pk])
        row = cursor.fetchone()
    if row is None:
        raise Message.DoesNotExist(f"Message {message.pk} is gone.")
    return str(row[0]), int(row[1])


def message_retract(*, message: Message, actor: AbstractBaseUser | None = None) -> bool:
    """Retract from every inbox at once; returns False if it was retracted already.

    Readers settle the removal on their next read (and hide it at once);
    the row stays for the record.
    """
    with transaction.atomic():
        locked = Message.objects.select_for_update().get(pk=message.pk)
        if locked.status in (MessageStatus.RETRACTED, MessageStatus.CANCELLED):
            return False
        if locked.status == MessageStatus.SCHEDULED:
            # Not sent yet: nothing is in Redis, so a plain UPDATE (no receiver,
            # no removal to project) cancels it; the lock keeps the send job out.
            Message.objects.filter(pk=message.pk).update(status=MessageStatus.CANCELLED, retracted_at=timezone.now())
            message.refresh_from_db()
            return True
        # The post_save receiver asks for its removal from Redis after commit.
        locked.status = MessageStatus.RETRACTED
        locked.retracted_at = timezone.now()
        locked.save(update_fields=["status", "retracted_at"])
        group_item_removed(group_key=locked.group_key, audience=locked.audience, member=message_entry(locked).member)
        if locked.actions:
            projection.messages_answered_removed([locked.pk])
    message.refresh_from_db()
    return True


def message_cleanup_expired(*, now: datetime | None = None, batch: int = 500) -> int:
    """Free Redis of messages whose expiry has passed (a periodic task).

    Inboxes hide them exactly at expire_at already; this drops what is
    stored once (pull entries, details, audience bitmaps). Returns how many.
    """
    now = now or timezone.now()
    size = int(settings.MESSAGECENTER_BITMAP_CHUNK_USERS)
    # mc_message_status_idx serves this (status, expire_at) range.
    expired_rows = Message.objects.filter(
        status__in=[MessageStatus.DELIVERED, MessageStatus.DELIVERING], expire_at__lte=now
    )
    expired = list(expired_rows.order_by("expire_at")[:batch])
    pull_members, refs, chunks = [], [], {}
    for message in expired:
        entry = message_entry(message)
        refs.append(entry.ref)
        if message.delivery == DeliveryMode.PULL:
            pull_members.append(publish.pull_member(entry, everyone=message.everyone))
            audience = message.audience
            if audience:
                chunks[entry.ref] = list(range(audience.min() // size, audience.max() // size + 1))
    publish.pull_expired_drop(pull_members=pull_members, refs=refs, audience_chunks=chunks)
    Message.objects.filter(pk__in=[m.pk for m in expired]).update(status=MessageStatus.EXPIRED)
    for message in expired:  # until now an expired row hid its group's older items
        group_item_removed(group_key=message.group_key, audience=message.audience, member=message_entry(message).member)
    projection.messages_answered_removed([m.pk for m in expired if m.actions])
    return len(expired)
