"""Importing a django-notifications-hq database's notifications into this one.

Rows keep their ids (links such as ``/inbox/notifications/mark-as-read/<slug>/``
keep working). Users and content types are matched by what they are, not by
their ids in the other database: content types by app label and model, users
by id (the same accounts) or by username. Everything is checked before the
first row is written; then batches of rows go in one transaction each, in id
order, each batch ending with a whole send. A row whose id is here already is
skipped (the same row) or refused (another row: the ids clash), so a run that
stopped can simply be run again, and a second run changes nothing.

Unread rows can also be delivered into the inbox, one message per send of
the incumbent (rows of one send share their timestamp, actor, verb, objects
and text), as ``notify.send`` does now.
"""

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import groupby
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.core.management.color import no_style
from django.db import connections, router, transaction
from django.utils.dateparse import parse_datetime

from core.api.errors import ValidationFailed
from notifications.models import Notification
from notifications.services.inbox import inbox_deliver
from notifications.sources import Source, SourceError

TABLE = "notifications_notification"
COLUMNS = (
    "id",
    "level",
    "recipient_id",
    "unread",
    "actor_content_type_id",
    "actor_object_id",
    "verb",
    "description",
    "target_content_type_id",
    "target_object_id",
    "action_object_content_type_id",
    "action_object_object_id",
    "timestamp",
    "public",
    "deleted",
    "emailed",
    "data",
)
_SELECT = ", ".join(f'"{c}"' for c in COLUMNS)
# The fields of a row that are the same for every recipient of one send.
_SEND = (4, 5, 6, 7, 8, 9, 10, 11, 12, 1)
_IDS_SHOWN = 20


class ImportRefused(ValidationFailed):
    """The source or the options cannot be imported as they are (the message says why, and what to do)."""


@dataclass
class ImportReport:
    rows: int = 0  # rows in the source after ``after_id``
    imported: int = 0
    present: int = 0  # here already (an earlier run)
    skipped_users: int = 0  # rows naming users missing here (with skip_missing_users)
    messages: int = 0  # sends delivered into the inbox
    last_id: int = 0
    missing_users: list[int] = field(default_factory=list)


def _ids(values: Iterable[Any]) -> str:
    shown = sorted(values)
    more = f" and {len(shown) - _IDS_SHOWN} more" if len(shown) > _IDS_SHOWN else ""
    return ", ".join(str(v) for v in shown[:_IDS_SHOWN]) + more


def _columns_check(source: Source) -> None:
    present = set(source.columns(TABLE))
    missing = [c for c in COLUMNS if c not in present]
    if missing:
        raise ImportRefused(
            f"{source.name}: {TABLE} lacks {', '.join(missing)}: migrate it with django-notifications-hq "
            "to its migration 0009 (release 1.8) first."
        )


def _content_types(source: Source) -> dict[int, ContentType]:
    """Source content type id -> the one here with the same app label and model."""
    used = {
        int(row[0])
        for column in ("actor_content_type_id", "target_content_type_id", "action_object_content_type_id")
        for row in source.rows(f'SELECT DISTINCT "{column}" FROM "{TABLE}" WHERE "{column}" IS NOT NULL')  # noqa: S608
    }
    if not used:
        return {}
    marks = ", ".join(["%s"] * len(used))
    names = {
        int(pk): (str(app), str(model))
        for pk, app, model in source.rows(
            f'SELECT "id", "app_label", "model" FROM "django_content_type" WHERE "id" IN ({marks})',  # noqa: S608
            sorted(used),
        )
    }
    unnamed = used - set(names)
    if unnamed:
        raise ImportRefused(f"{source.name}: content type ids {_ids(unnamed)} are not in its django_content_type.")
    found: dict[int, ContentType] = {}
    unknown = []
    for pk, (app, model) in names.items():
        try:
            found[pk] = ContentType.objects.get_by_natural_key(app, model)
        except ContentType.DoesNotExist:
            unknown.append(f"{app}.{model}")
    if unknown:
        raise ImportRefused(
            f"Notifications in {source.name} name objects of models this project lacks: {', '.join(sorted(unknown))}. "
            "Install the apps that define them (and migrate) before importing."
        )
    return found


def _user_type_ids(types: dict[int, ContentType]) -> set[int]:
    """The source's content type ids that are this project's user model."""
    user_type = ContentType.objects.get_for_model(get_user_model())
    return {pk for pk, ct in types.items() if ct.pk == user_type.pk}


def _referenced_users(source: Source, *, user_type_ids: set[int], after_id: int) -> set[int]:
    """Source user ids the rows after ``after_id`` name: recipients, and actors,
    targets and action objects that are users."""
    found = {
        int(row[0])
        for row in source.rows(f'SELECT DISTINCT "recipient_id" FROM "{TABLE}" WHERE "id" > %s', [after_id])  # noqa: S608
    }
    if user_type_ids:
        marks = ", ".join(["%s"] * len(user_type_ids))
        for name in ("actor", "target", "action_object"):
            query = (
                f'SELECT DISTINCT "{name}_object_id" FROM "{TABLE}" '  # noqa: S608
                f'WHERE "id" > %s AND "{name}_content_type_id" IN ({marks})'
            )
            rows = source.rows(query, [after_id, *sorted(user_type_ids)])
            found.update(int(r[0]) for r in rows if str(r[0]).isdigit())
    return found


def _users(source: Source, *, wanted: set[int], by: str, user_table: str) -> dict[int, int]:
    """Source user id -> user id here, for the ``wanted`` ones found here."""
    model = get_user_model()
    if by == "id":
        here = set(model._default_manager.filter(pk__in=wanted).values_list("pk", flat=True))
        return {pk: pk for pk in wanted if pk in here}
    if by != "username":
        raise ImportRefused(f"Match users by id or by username, not {by!r}.")
    field_name = model.USERNAME_FIELD
    try:
        names = {int(pk): str(name) for pk, name in source.rows(f'SELECT "id", "{field_name}" FROM "{user_table}"')}  # noqa: S608
    except SourceError as exc:
        raise ImportRefused(f"Cannot read the users' {field_name} from {user_table}: {exc}") from exc
    names = {pk: name for pk, name in names.items() if pk in wanted}
    here_by_name = dict(
        model._default_manager.filter(**{f"{field_name}__in": list(names.values())}).values_list(field_name, "pk")
    )
    return {pk: int(here_by_name[name]) for pk, name in names.items() if name in here_by_name}


def _data(raw: Any, row_id: int) -> Any:
    """``data`` as the incumbent stored it: JSON text (jsonfield), or JSON a driver decoded already."""
    if raw is None or not isinstance(raw, str | bytes):
        return raw
    try:
        return json.loads(raw) if raw.strip() else None
    except ValueError as exc:
        raise ImportRefused(f"Notification {row_id}: its data is not JSON ({exc}); fix or clear it first.") from exc


def _timestamp(raw: Any, row_id: int) -> datetime:
    value = raw if isinstance(raw, datetime) else parse_datetime(str(raw))
    if value is None:
        raise ImportRefused(f"Notification {row_id}: its timestamp {raw!r} is not a date and time.")
    # SQLite and timezone-less columns hold UTC (Django's USE_TZ storage).
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class _Mapper:
    """Source rows -> rows here: content types and users by what they are."""

    def __init__(self, *, types: dict[int, ContentType], users: dict[int, int], user_type_ids: set[int]) -> None:
        self.types = types
        self.users = users
        self.user_type_ids = user_type_ids

    def _object_id(self, type_id: Any, object_id: Any) -> str | None:
        """The object's id here: a user's mapped, anything else's as it was.
        Raises KeyError for a user missing here."""
        if object_id is None:
            return None
        if type_id is not None and int(type_id) in self.user_type_ids and str(object_id).isdigit():
            return str(self.users[int(object_id)])
        return str(object_id)

    def _type(self, type_id: Any) -> ContentType | None:
        return None if type_id is None else self.types[int(type_id)]

    def row(self, raw: Sequence[Any]) -> Notification | None:
        """The row as it goes in here; None when it names a user missing here."""
        values = dict(zip(COLUMNS, raw, strict=True))
        row_id = int(values["id"])
        try:
            recipient_id = self.users[int(values["recipient_id"])]
            objects = {
                name: self._object_id(values[f"{name}_content_type_id"], values[f"{name}_object_id"])
                for name in ("actor", "target", "action_object")
            }
        except KeyError:
            return None
        return Notification(
            id=row_id,
            level=values["level"],
            recipient_id=recipient_id,
            unread=bool(values["unread"]),
            actor_content_type=self._type(values["actor_content_type_id"]),
            actor_object_id=objects["actor"] or "",
            verb=values["verb"],
            description=values["description"],
            target_content_type=self._type(values["target_content_type_id"]),
            target_object_id=objects["target"],
            action_object_content_type=self._type(values["action_object_content_type_id"]),
            action_object_object_id=objects["action_object"],
            timestamp=_timestamp(values["timestamp"], row_id),
            public=bool(values["public"]),
            deleted=bool(values["deleted"]),
            emailed=bool(values["emailed"]),
            data=_data(values["data"], row_id),
        )


def _batch(source: Source, *, after: int, size: int) -> list[tuple[Any, ...]]:
    """The next ``size`` rows after id ``after``, and then the rest of the last
    row's send: a send is never split between two batches (two messages)."""
    query = f'SELECT {_SELECT} FROM "{TABLE}" WHERE "id" > %s ORDER BY "id" LIMIT %s'  # noqa: S608
    rows = source.rows(query, [after, size])
    while rows:
        send = [rows[-1][i] for i in _SEND]
        more = source.rows(query, [rows[-1][0], size])
        same = list(_same_send(more, send))
        rows.extend(same)
        if len(same) < len(more) or not more:
            break
    return rows


def _same_send(rows: Sequence[tuple[Any, ...]], send: list[Any]) -> Iterable[tuple[Any, ...]]:
    for row in rows:
        if [row[i] for i in _SEND] != send:
            return
        yield row


def _clashes(rows: Sequence[Notification]) -> tuple[set[int], list[int]]:
    """(ids here already as the same rows, ids here already as other rows)."""
    here = {
        pk: (recipient_id, verb, timestamp)
        for pk, recipient_id, verb, timestamp in Notification.objects.filter(pk__in=[r.pk for r in rows]).values_list(
            "pk", "recipient_id", "verb", "timestamp"
        )
    }
    same = {r.pk for r in rows if here.get(r.pk) == (r.recipient_id, r.verb, r.timestamp)}
    return same, sorted(set(here) - same)


def _send_key(row: Notification) -> tuple[Any, ...]:
    return (
        row.timestamp,
        row.actor_content_type_id,
        row.actor_object_id,
        row.verb,
        row.target_content_type_id,
        row.target_object_id,
        row.action_object_content_type_id,
        row.action_object_object_id,
        row.description,
        row.level,
    )


def _deliver(rows: Sequence[Notification]) -> int:
    """One message per send among the unread, undeleted rows; returns messages sent."""
    wanted = sorted((r for r in rows if r.unread and not r.deleted), key=lambda r: (_send_key(r)[0], r.pk))
    sent = 0
    for _key, group in groupby(wanted, key=_send_key):
        send = list(group)
        first = send[0]
        if inbox_deliver(notifications=send, actor=first.actor, action_object=first.action_object, target=first.target):
            sent += 1
    return sent


def notifications_import(
    *,
    source: Source,
    batch_size: int = 1000,
    after_id: int = 0,
    users_by: str = "id",
    user_table: str = "auth_user",
    skip_missing_users: bool = False,
    deliver: bool = True,
    progress: Callable[[ImportReport], None] | None = None,
) -> ImportReport:
    """Import every row of the source's notifications table after ``after_id``
    (see the module); ``deliver``: unread rows reach the inbox too. Raises
    ImportRefused, before writing anything, for a source or options it
    cannot import; ``progress`` hears after each batch."""
    if batch_size < 1:
        raise ImportRefused("The batch size must be at least 1.")
    _columns_check(source)
    types = _content_types(source)
    user_type_ids = _user_type_ids(types)
    wanted = _referenced_users(source, user_type_ids=user_type_ids, after_id=after_id)
    users = _users(source, wanted=wanted, by=users_by, user_table=user_table)
    missing = wanted - set(users)
    if missing and not skip_missing_users:
        other_way = " match users by username," if users_by == "id" else ""
        raise ImportRefused(
            f"Users the notifications name (recipients, actors or objects) are missing here, by {users_by}: "
            f"{_ids(missing)}. Create them first,{other_way} or skip the notifications that name them."
        )
    report = ImportReport(
        rows=int(source.rows(f'SELECT COUNT(*) FROM "{TABLE}" WHERE "id" > %s', [after_id])[0][0]),  # noqa: S608
        missing_users=sorted(missing),
    )
    mapper = _Mapper(types=types, users=users, user_type_ids=user_type_ids)
    after = after_id
    while batch := _batch(source, after=after, size=batch_size):
        after = int(batch[-1][0])
        rows = [row for raw in batch if (row := mapper.row(raw)) is not None]
        report.skipped_users += len(batch) - len(rows)
        same, other = _clashes(rows)
        if other:
            raise ImportRefused(
                f"Notifications {_ids(other)} exist here already as other rows (the ids clash): import into a "
                "project that has not sent notifications of its own yet."
            )
        new = [r for r in rows if r.pk not in same]
        with transaction.atomic():
            Notification.objects.bulk_create(new)
            if deliver:
                report.messages += _deliver(new)
        report.imported += len(new)
        report.present += len(same)
        report.last_id = after
        if progress is not None:
            progress(report)
    _sequence_reset()
    return report


def _sequence_reset() -> None:
    """Move the id sequence past the imported ids: the next notify.send must
    not pick one of them (PostgreSQL; SQLite moves on by itself)."""
    connection = connections[router.db_for_write(Notification)]
    statements = connection.ops.sequence_reset_sql(no_style(), [Notification])
    if statements:
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
