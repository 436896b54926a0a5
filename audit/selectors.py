"""Reads of the audit log."""

from datetime import datetime

from audit.models import AuditEntry
from core.api.pagination import KeysetPage, keyset_page
from core.api.params import page_scope


def audit_list(
    *,
    limit: int,
    cursor: str | None,
    actor: str | None = None,
    action: str | None = None,
    object_type: str | None = None,
    object_id: str | None = None,
    since: datetime | None = None,
) -> KeysetPage[AuditEntry]:
    """The audit log newest first, filtered (``actor`` is a username as recorded)."""
    filters = {"actor": actor, "action": action, "object_type": object_type, "object_id": object_id, "since": since}
    entries = AuditEntry.objects.all()
    if actor is not None:
        entries = entries.filter(actor_name=actor)
    if action is not None:
        entries = entries.filter(action=action)
    if object_type is not None:
        entries = entries.filter(object_type=object_type)
    if object_id is not None:
        entries = entries.filter(object_id=object_id)
    if since is not None:
        entries = entries.filter(at__gt=since)
    return keyset_page(entries, limit=limit, cursor=cursor, scope=page_scope("audit", filters), time_field="at")
