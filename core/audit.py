"""Adapters from a request (manage API or Django admin) to the audit log.

Every operator write records one ``AuditEntry`` per object it touched, in the
write's own transaction (``core.services.audit_record``): the API views wrap
their service call and the record in one ``transaction.atomic()``; the admin
records through ``AuditedAdminMixin``, whose hooks Django calls inside the
transaction of the save or delete (and whose actions it wraps in one).
core names no app: apps pass their objects, the model's label names the type.
"""

import csv
import io
import json
from collections.abc import Iterable, Mapping
from typing import Any

from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db import models, transaction
from django.http import HttpRequest
from django.utils.encoding import force_str

from core.models import AuditEntry
from core.services import audit_record


def object_type_of(obj: models.Model | type[models.Model]) -> str:
    """``app_label.model`` (``messagecenter.message``): the ``object_type`` of an entry."""
    return str(obj._meta.label_lower)


def _client_ip(request: HttpRequest) -> str | None:
    # REMOTE_ADDR only: a forwarded-for header is whatever the client wrote
    # unless a trusted proxy sets it, and the log must not record a claim.
    value = request.META.get("REMOTE_ADDR") or None
    return str(value) if value else None


def audit_api(
    request: Any,
    *,
    action: str,
    obj: models.Model | None = None,
    object_type: str | None = None,
    object_id: Any = None,
    changes: Mapping[str, Any] | None = None,
) -> AuditEntry:
    """Record a manage API write by ``request.user`` (call it inside the write's transaction)."""
    return audit_record(
        actor=request.user,
        action=action,
        object_type=object_type or (object_type_of(obj) if obj is not None else ""),
        object_id=object_id if object_id is not None else (obj.pk if obj is not None else None),
        object_repr=force_str(obj)[:200] if obj is not None else "",
        changes=changes,
        source="api",
        path=request.path,
        ip=_client_ip(request),
    )


def audit_admin(
    request: HttpRequest, *, action: str, obj: models.Model, changes: Mapping[str, Any] | None = None
) -> AuditEntry:
    """Record a Django admin write (inside the admin's transaction)."""
    return audit_record(
        actor=getattr(request, "user", None),
        action=action,
        object_type=object_type_of(obj),
        object_id=obj.pk,
        object_repr=force_str(obj)[:200],
        changes=changes,
        source="admin",
        path=request.path,
        ip=_client_ip(request),
    )


def _admin_changes(message: Any) -> dict[str, Any]:
    # Django's change message: a list like [{"changed": {"fields": ["Title"]}}].
    return {"admin": message} if message else {}


class AuditedAdminMixin(admin.ModelAdmin):
    """Every project ModelAdmin inherits it: saves, deletes (one or in bulk) and
    actions write the audit log beside Django's own LogEntry.

    Django calls ``log_addition``/``log_change``/``log_deletions`` inside the
    transaction of the change form and the delete view; actions (the bulk
    delete included) are wrapped here in one transaction with their entries.
    Actions that change nothing (a dry run, a report) are named in
    ``audit_skip_actions``.
    """

    audit_skip_actions: tuple[str, ...] = ()

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        entry = super().log_addition(request, obj, message)
        audit_admin(request, action="create", obj=obj, changes=_admin_changes(message))
        return entry

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        entry = super().log_change(request, obj, message)
        audit_admin(request, action="update", obj=obj, changes=_admin_changes(message))
        return entry

    def log_deletions(self, request: HttpRequest, queryset: Any) -> Any:
        # Called before the rows go (the delete view passes a list of one).
        objects = list(queryset)
        entries = super().log_deletions(request, queryset)
        for obj in objects:
            audit_admin(request, action="delete", obj=obj)
        return entries

    def response_action(self, request: HttpRequest, queryset: Any, *args: Any, **kwargs: Any) -> Any:
        action = str(request.POST.get("action", ""))
        selected = request.POST.getlist(ACTION_CHECKBOX_NAME)
        with transaction.atomic():
            response = super().response_action(request, queryset, *args, **kwargs)
            # delete_selected logs each object through log_deletions; any other
            # action is recorded under its own name for each selected object.
            if action and action != "delete_selected" and action not in self.audit_skip_actions:
                every = request.POST.get("select_across") == "1"
                chosen = queryset if every else self.model._default_manager.filter(pk__in=selected)
                for obj in chosen:
                    audit_admin(request, action=action, obj=obj)
        return response


CSV_COLUMNS = (
    "id",
    "at",
    "actor",
    "action",
    "object_type",
    "object_id",
    "object_repr",
    "source",
    "path",
    "ip",
    "changes",
)


def _csv_cell(value: str) -> str:
    # A cell a spreadsheet would run as a formula (=, +, -, @) is prefixed with
    # a quote: the log holds operator-typed titles.
    return "'" + value if value[:1] in {"=", "+", "-", "@", "\t", "\r"} else value


def audit_csv(entries: Iterable[AuditEntry]) -> str:
    """The entries as CSV (one header row, then one row per entry)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for entry in entries:
        writer.writerow(
            [
                _csv_cell(str(value))
                for value in (
                    entry.pk,
                    entry.at.isoformat(),
                    entry.actor_name,
                    entry.action,
                    entry.object_type,
                    entry.object_id,
                    entry.object_repr,
                    entry.source,
                    entry.path,
                    entry.ip or "",
                    json.dumps(entry.changes, sort_keys=True, ensure_ascii=False),
                )
            ]
        )
    return out.getvalue()
