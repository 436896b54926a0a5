"""The recipients a fan-out reached, in PostgreSQL: the index a user's fill
reads their pushed items by (``MessageRecipient``, ``NotificationRecipient``).

Each fan-out chunk writes its users' rows before its Redis write, so every
entry Redis got has its row; a rerun adds nothing (``ON CONFLICT DO
NOTHING``). Without them a fill would test the user against the audience
bitmap of every live pushed item, a cost that grows with everyone's items
rather than with the user's own.
"""

import json
from collections.abc import Sequence
from typing import cast

from django.db import connections, router
from django.db.models import Field

from messagecenter.models import Message, MessageRecipient, Notification, NotificationRecipient

# The users' ids go as one parameter that the database expands into rows: an
# array on PostgreSQL, a JSON list on SQLite (the embedded default).
# bulk_create built a model per recipient and sent two parameters each, which
# took most of a push's time (bench: "recipient rows", next to bulk_create).
# SQLite reads "FROM json_each(?) ON CONFLICT" as a join without its WHERE.
_EXPANDED = {
    "postgresql": "SELECT u, %s FROM unnest(%s::bigint[]) AS u WHERE true",
    "sqlite": "SELECT value, %s FROM json_each(%s) WHERE true",
}


def recipients_add(*, item: Message | Notification, user_ids: Sequence[int]) -> None:
    """Record that the fan-out of ``item`` reached these users: one statement."""
    if not user_ids:
        return
    model, item_field = (
        (MessageRecipient, "message") if isinstance(item, Message) else (NotificationRecipient, "notification")
    )
    connection = connections[router.db_for_write(model)]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(str(cast(Field, model._meta.get_field(name)).column)) for name in ("user", item_field))
    ids = [int(u) for u in user_ids]
    sql = f"INSERT INTO {quote(model._meta.db_table)} ({columns}) {_EXPANDED[connection.vendor]} ON CONFLICT DO NOTHING"
    with connection.cursor() as cursor:
        cursor.execute(sql, [item.pk, ids if connection.vendor == "postgresql" else json.dumps(ids)])
