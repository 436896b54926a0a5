"""Adapters from a request (manage API or Django admin) to the audit log.

Every operator write records one ``AuditEntry`` per object it touched, in the
write's own transaction (``audit.services.audit_record``): the API views wrap
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

from django import forms
from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db import models, transaction
from django.http import HttpRequest
from django.utils.encoding import force_str

from audit.models import AuditEntry
from audit.services import audit_record


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
    request: HttpRequest,
    *,
    action: str,
    obj: models.Model | None = None,
    object_type: str | None = None,
    object_id: Any = None,
    object_repr: str | None = None,
    changes: Mapping[str, Any] | None = None,
) -> AuditEntry:
    """Record a Django admin write (inside the admin's transaction).

    A write that names no row yet (a check queued, a clean-up of rows the
    operator did not pick) passes ``object_type`` and no ``obj``."""
    if object_repr is None:
        object_repr = force_str(obj) if obj is not None else ""
    return audit_record(
        actor=getattr(request, "user", None),
        action=action,
        object_type=object_type or (object_type_of(obj) if obj is not None else ""),
        object_id=object_id if object_id is not None else (obj.pk if obj is not None else None),
        object_repr=object_repr[:200],
        changes=changes,
        source="admin",
        path=request.path,
        ip=_client_ip(request),
    )


def form_changes(form: forms.BaseForm, *, add: bool) -> dict[str, Any]:
    """What an admin form wrote: for an addition each field's value, for a change
    ``{"old": ..., "new": ...}`` of each changed field.

    The values are cleaned by ``audit_record`` like an API write's (secrets
    masked, rows as ids, long values cut)."""
    cleaned = getattr(form, "cleaned_data", {})
    names = list(form.fields) if add else list(form.changed_data)
    changes: dict[str, Any] = {}
    for name in names:
        if add:
            changes[name] = cleaned.get(name)
        elif name in form.fields:
            changes[name] = {"old": form.get_initial_for_field(form.fields[name], name), "new": cleaned.get(name)}
        else:
            # A change a form names as a whole (the password form says
            # "password" for its two fields): recorded without values.
            changes[name] = {"old": None, "new": None}
    return changes


def _admin_changes(form_values: dict[str, Any] | None, message: Any) -> dict[str, Any]:
    # Django's change message lists the inline rows added, changed or deleted
    # (each named); the form's own fields are recorded with their values. A
    # change that came through no form (Django called log_change itself) keeps
    # Django's message.
    if form_values is None:
        return {"admin": message} if message else {}
    inlines = [item for item in message or [] if any("name" in part for part in item.values())]
    return {**form_values, **({"inlines": inlines} if inlines else {})}


# Where construct_change_message leaves the form's values for the log_* call
# that follows it in the same request (the changelist's editable rows run the
# pair once per row).
_FORM_CHANGES_ATTR = "audit_form_changes"


class AuditedAdminMixin(admin.ModelAdmin):
    """Every project ModelAdmin inherits it: saves, deletes (one or in bulk) and
    actions write the audit log beside Django's own LogEntry.

    Django calls ``log_addition``/``log_change``/``log_deletions`` inside the
    transaction of the change form and the delete view; actions (the bulk
    delete included) are wrapped here in one transaction with their entries.
    Actions that change nothing (a dry run, a report) are named in
    ``audit_skip_actions``. A save records the form's values (``form_changes``:
    old and new of each changed field), cleaned as an API write's are.
    """

    audit_skip_actions: tuple[str, ...] = ()

    def audit_id(self, obj: Any) -> Any:
        """The ``object_id`` of an entry; an admin whose rows are keyed by a secret overrides it."""
        return obj.pk

    def audit_repr(self, obj: Any) -> str:
        """The ``object_repr`` of an entry; an admin whose rows print a secret overrides it."""
        return force_str(obj)

    def _audit(self, request: HttpRequest, action: str, obj: Any, changes: Mapping[str, Any] | None = None) -> None:
        audit_admin(
            request,
            action=action,
            obj=obj,
            object_id=self.audit_id(obj),
            object_repr=self.audit_repr(obj),
            changes=changes,
        )

    def construct_change_message(self, request: HttpRequest, form: Any, formsets: Any, add: bool = False) -> Any:
        message = super().construct_change_message(request, form, formsets, add)
        setattr(request, _FORM_CHANGES_ATTR, form_changes(form, add=add))
        return message

    def _changes(self, request: HttpRequest, message: Any) -> dict[str, Any]:
        form_values = getattr(request, _FORM_CHANGES_ATTR, None)
        if form_values is not None:
            delattr(request, _FORM_CHANGES_ATTR)
        return _admin_changes(form_values, message)

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        entry = super().log_addition(request, obj, message)
        changes = self._changes(request, message)
        self._audit(request, "create", obj, changes)
        return entry

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        entry = super().log_change(request, obj, message)
        changes = self._changes(request, message)
        self._audit(request, "update", obj, changes)
        return entry

    def log_deletions(self, request: HttpRequest, queryset: Any) -> Any:
        # Called before the rows go (the delete view passes a list of one).
        objects = list(queryset)
        entries = super().log_deletions(request, queryset)
        for obj in objects:
            self._audit(request, "delete", obj)
        return entries

    def response_action(self, request: HttpRequest, queryset: Any, *args: Any, **kwargs: Any) -> Any:
        action = str(request.POST.get("action", ""))
        selected = request.POST.getlist(ACTION_CHECKBOX_NAME)
        every = request.POST.get("select_across") == "1"
        # Django runs an action only if this user may (it is offered to them)
        # and rows were picked; a refused one writes nothing and records nothing.
        # The rows are read before it runs: an action may delete them.
        # delete_selected logs each object through log_deletions instead.
        recorded = (
            action in self.get_actions(request)
            and (every or bool(selected))
            and action != "delete_selected"
            and action not in self.audit_skip_actions
        )
        with transaction.atomic():
            chosen = list(queryset if every else queryset.filter(pk__in=selected)) if recorded else []
            response = super().response_action(request, queryset, *args, **kwargs)
            for obj in chosen:
                self._audit(request, action, obj)
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
