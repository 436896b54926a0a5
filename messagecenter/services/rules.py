"""Configurable business rules: scan a table on a schedule and
raise a notification per matching object.

A rule is a model (any installed one), a filter written as field lookups
(``{"quantity__lt": 0}``: validated against the model, no code, no SQL), a
message type, a scope (fixed or read from a field of the object) and title /
body templates rendered with the object's field values. Each object notifies
once while it matches (a ``RuleMatch`` row remembers it); when it stops
matching its notification is withdrawn from every inbox, and a later match
notifies again. Every run is recorded as a ``RuleRun``; a broken rule records
its error and never stops the others.
"""

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.db import IntegrityError, models, transaction
from django.db.models import Q
from django.template import Context, Engine, TemplateSyntaxError
from django.utils import timezone

from core.api.errors import ApplicationError, ValidationFailed
from core.html import html_to_text, sanitize_html
from messagecenter.models import Notification, NotificationRule, RuleMatch, RuleRun
from messagecenter.services.notifications import notification_send, notification_withdraw

logger = logging.getLogger(__name__)

# Comparisons a rule may use; transforms (``__date``, ``__year``) and custom
# lookups are not needed for "find abnormal rows" and widen the surface.
ALLOWED_LOOKUPS = frozenset(
    {
        "exact", "iexact", "lt", "lte", "gt", "gte", "in", "range", "isnull",
        "contains", "icontains", "startswith", "istartswith", "endswith", "iendswith",
    }
)  # fmt: skip
MAX_NEW_PER_RUN = 500  # notifications one run may raise; the rest wait for the next run
MAX_PREVIEW = 50

# A template engine of its own: no loaders (no {% include %} / {% extends %} of
# files), no extra tag libraries, autoescape on. Templates only see plain
# values (a dict of the object's fields), so nothing can call a method.
_ENGINE = Engine(dirs=[], app_dirs=False, loaders=[], libraries={}, autoescape=True, debug=False)


class RuleError(ApplicationError):
    code = "invalid_rule"


def rule_model(*, rule: NotificationRule) -> type[models.Model]:
    model = rule.content_type.model_class()
    if model is None:
        raise RuleError(f"The model {rule.content_type} is not installed.")
    return model


def _lookup_error(key: str, message: str) -> ValidationFailed:
    return ValidationFailed(f"Filter {key!r}: {message}", code="invalid_filter", fields={"filters": [message]})


def _lookup_resolve(model: type[models.Model], key: str) -> tuple[Any, str]:
    """The field a lookup path ends on, and its lookup (``exact`` when absent)."""
    parts = key.split("__")
    current: type[models.Model] = model
    final: Any = None
    for position, part in enumerate(parts):
        try:
            final = current._meta.get_field(part)
        except FieldDoesNotExist:
            if position == len(parts) - 1 and position > 0:
                return final, part
            raise _lookup_error(key, f"{current.__name__} has no field {part!r}.") from None
        if position < len(parts) - 1:
            related = getattr(final, "related_model", None)
            if related is None:
                # The next part must then be the lookup, and the last one.
                if position + 2 != len(parts):
                    raise _lookup_error(key, f"{part!r} is not a relation.")
                continue
            current = related
    return final, "exact"


_SCALAR = (str, int, float, bool, type(None))


def _lookup_value_check(key: str, lookup: str, value: Any) -> None:
    if lookup in {"in", "range"}:
        if not isinstance(value, list) or not all(isinstance(v, _SCALAR) for v in value):
            raise _lookup_error(key, f"{lookup!r} needs a list of values.")
        if lookup == "range" and len(value) != 2:
            raise _lookup_error(key, "'range' needs two values.")
    elif not isinstance(value, _SCALAR):
        raise _lookup_error(key, "the value must be a string, number, boolean or null.")


def rule_filters_validate(*, model: type[models.Model], filters: Any) -> Q:
    """The filter as a Q object; every path and lookup checked against the model.

    Paths may follow relations (``product__category__name``); the last part
    may be one of ALLOWED_LOOKUPS (``exact`` when absent). Values must be JSON
    scalars, or lists for ``in`` / ``range``.
    """
    if not isinstance(filters, Mapping):
        raise ValidationFailed("The filter must be a JSON object of field lookups.", code="invalid_filter")
    condition = Q()
    for key, value in filters.items():
        if not isinstance(key, str) or not key:
            raise _lookup_error(str(key), "not a field lookup.")
        final, lookup = _lookup_resolve(model, key)
        if lookup not in ALLOWED_LOOKUPS:
            raise _lookup_error(key, f"lookup {lookup!r} is not allowed (use {', '.join(sorted(ALLOWED_LOOKUPS))}).")
        if final is None or final.get_lookup(lookup) is None:
            raise _lookup_error(key, f"lookup {lookup!r} does not apply to this field.")
        _lookup_value_check(key, lookup, value)
        condition &= Q(**{key: value})
    return condition


def _template(source: str, name: str) -> Any:
    try:
        return _ENGINE.from_string(source)
    except TemplateSyntaxError as exc:
        raise ValidationFailed(f"{name}: {exc}", code="invalid_template", fields={name: [str(exc)]}) from exc


def rule_validate(*, rule: NotificationRule) -> None:
    """Everything that can be checked without data: model, filter, scope, templates."""
    model = rule_model(rule=rule)
    rule_filters_validate(model=model, filters=rule.filters)
    if bool(rule.scope) == bool(rule.scope_field):
        raise ValidationFailed(
            "Give either a fixed scope or a scope field.",
            code="invalid_scope",
            fields={"scope": ["Give either a fixed scope or a scope field."]},
        )
    if rule.scope_field:
        try:
            model._meta.get_field(rule.scope_field)
        except FieldDoesNotExist:
            raise ValidationFailed(
                f"{model.__name__} has no field {rule.scope_field!r}.",
                code="invalid_scope",
                fields={"scope_field": ["No such field."]},
            ) from None
    _template(rule.title_template, "title_template")
    _template(rule.body_template, "body_template")


def _object_context(obj: models.Model) -> dict[str, Any]:
    values = {f.name: f.value_from_object(obj) for f in obj._meta.concrete_fields}
    return {"object": values, "pk": obj.pk}


@dataclass(frozen=True)
class Rendered:
    object_pk: str
    scope: str
    title: str
    body_html: str


def _render(rule: NotificationRule, obj: models.Model) -> Rendered:
    context = _object_context(obj)
    if rule.scope_field:
        value = context["object"].get(rule.scope_field)
        if value is None or str(value).strip() == "":
            raise RuleError(f"object {obj.pk}: the scope field {rule.scope_field!r} is empty.")
        scope = str(value)
    else:
        scope = rule.scope
    title = html_to_text(_template(rule.title_template, "title_template").render(Context(context)))
    body = sanitize_html(_template(rule.body_template, "body_template").render(Context(context)))
    if not title:
        raise RuleError(f"object {obj.pk}: the title renders empty.")
    return Rendered(object_pk=str(obj.pk), scope=scope, title=title[:200], body_html=body)


@dataclass
class RuleOutcome:
    rule: NotificationRule
    matches: int = 0
    sent: int = 0
    withdrawn: int = 0
    errors: list[str] = field(default_factory=list)
    preview: list[Rendered] = field(default_factory=list)  # dry runs: what would be sent
    run: RuleRun | None = None


def _run(rule: NotificationRule, outcome: RuleOutcome, *, dry_run: bool) -> None:
    rule_validate(rule=rule)
    model = rule_model(rule=rule)
    query = rule_filters_validate(model=model, filters=rule.filters)
    manager = model._default_manager
    known = dict(RuleMatch.objects.filter(rule=rule).values_list("object_pk", "notification_id"))
    matching = manager.filter(query).order_by("pk")
    outcome.matches = matching.count()
    # Objects that stopped matching: withdraw what they raised, forget them.
    if known:
        still = {str(pk) for pk in manager.filter(query).filter(pk__in=list(known)).values_list("pk", flat=True)}
        cleared = [pk for pk in known if pk not in still]
        if not dry_run:
            for object_pk in cleared:
                with transaction.atomic():
                    notification = Notification.objects.filter(pk=known[object_pk]).first()
                    if notification is not None:
                        notification_withdraw(notification=notification)
                    RuleMatch.objects.filter(rule=rule, object_pk=object_pk).delete()
        outcome.withdrawn = len(cleared)
    # New matches notify once each; known ones are left alone.
    new = matching.exclude(pk__in=list(known)) if known else matching
    limit = MAX_PREVIEW if dry_run else MAX_NEW_PER_RUN
    for obj in new[:limit]:
        try:
            rendered = _render(rule, obj)
        except Exception as exc:  # a template or field error of one object: record it, go on
            outcome.errors.append(f"object {obj.pk}: {exc}")
            continue
        if dry_run:
            outcome.preview.append(rendered)
            continue
        try:
            with transaction.atomic():
                notification = notification_send(
                    message_type=rule.message_type.code,
                    scope=rendered.scope,
                    title=rendered.title,
                    body_html=rendered.body_html,
                    ttl_seconds=rule.ttl_seconds,
                    source=obj,
                    rule=rule,
                )
                RuleMatch.objects.create(rule=rule, object_pk=rendered.object_pk, notification=notification)
        except IntegrityError:
            continue  # a concurrent run recorded this match first; its notification stands
        except ApplicationError as exc:
            outcome.errors.append(f"object {obj.pk}: {exc.message}")
            continue
        outcome.sent += 1


def rule_run(*, rule: NotificationRule, dry_run: bool = False, now: datetime | None = None) -> RuleOutcome:
    """Run one rule now. A dry run writes nothing and returns the rendered
    notifications it would send; a real run records a ``RuleRun`` (with the
    error, if the rule is broken) and moves ``last_run_at``."""
    now = now or timezone.now()
    outcome = RuleOutcome(rule=rule)
    try:
        _run(rule, outcome, dry_run=dry_run)
    except Exception as exc:  # a broken rule must never stop the others
        logger.warning("rule %s failed: %s", rule.pk, exc)
        message = exc.message if isinstance(exc, ApplicationError) else f"{type(exc).__name__}: {exc}"
        outcome.errors.append(message)
    if dry_run:
        return outcome
    outcome.run = RuleRun.objects.create(
        rule=rule,
        started_at=now,
        matches=outcome.matches,
        sent=outcome.sent,
        withdrawn=outcome.withdrawn,
        errors="\n".join(outcome.errors),
    )
    NotificationRule.objects.filter(pk=rule.pk).update(last_run_at=now)
    rule.last_run_at = now
    return outcome


def rules_due(*, now: datetime | None = None) -> list[NotificationRule]:
    """Enabled rules whose last run is at least their interval ago (or never ran)."""
    now = now or timezone.now()
    # mc_rule_due_idx serves the (enabled, last_run_at) scan; the interval test is per row.
    rules = NotificationRule.objects.filter(enabled=True).select_related("content_type", "message_type")
    return [r for r in rules if r.last_run_at is None or r.last_run_at + timedelta(seconds=r.interval_seconds) <= now]


def rules_run(
    *, rules: Iterable[NotificationRule], dry_run: bool = False, now: datetime | None = None
) -> list[RuleOutcome]:
    return [rule_run(rule=rule, dry_run=dry_run, now=now) for rule in rules]


def rules_run_due(*, now: datetime | None = None) -> list[RuleOutcome]:
    """Celery beat ``messagecenter.rules_run_due``: run every due rule once."""
    return rules_run(rules=rules_due(now=now), now=now)
