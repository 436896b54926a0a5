"""The user's own preferences: mutes, the e-mail digest choice, and
subscriptions to self-service message types.

Muting is kept as periods (``MutePeriod``): muting opens one, unmuting closes
it at that moment. Whether an item is hidden depends only on its time and
those periods (``messagecenter.mutes``), so deliveries, merges, the rebuild
and the PostgreSQL fallback agree, and unmuting brings nothing back. The
periods reach Redis through ``projection.user_mutes_changed`` after commit.
"""

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from core.api.errors import NotFound, PermissionDenied, ValidationFailed
from messagecenter import channel_prefs, projection
from messagecenter.fill import part_writing
from messagecenter.languages import user_language_changed
from messagecenter.models import CATEGORIES, EmailDigest, MessageType, MutePeriod, Subscription, UserPreferences
from messagecenter.quiet import parse_hhmm, zone_of
from messagecenter.readmodel import to_ms
from messagecenter.selectors import Preferences, preferences_get
from messagecenter.services.channels.email import ALL_CATEGORIES, channel_token_user
from messagecenter.services.notifications import subscription_create, subscription_delete

MAX_MUTED_TYPES = 500
DIGESTS: tuple[str, ...] = tuple(d.value for d in EmailDigest)


class Unchanged(enum.Enum):
    """A preference left out of an update (None there means "clear it")."""

    UNCHANGED = "unchanged"


UNCHANGED = Unchanged.UNCHANGED


def _strings(field: str, values: Any, *, limit: int) -> list[str]:
    """A list of strings, duplicates dropped (order kept)."""
    if not isinstance(values, list | tuple) or not all(isinstance(v, str) for v in values):
        raise ValidationFailed(f"{field} must be a list of strings.", fields={field: ["Give a list of strings."]})
    distinct = list(dict.fromkeys(values))
    if len(distinct) > limit:
        raise ValidationFailed(f"At most {limit} entries.", fields={field: [f"At most {limit} entries."]})
    return distinct


def preferences_update(
    *,
    user: AbstractBaseUser,
    muted_categories: Sequence[str] | None = None,
    muted_message_types: Sequence[str] | None = None,
    email_digest: str | None = None,
    channels: Mapping[str, Mapping[str, Any]] | None = None,
    quiet_hours: Mapping[str, Any] | Unchanged | None = UNCHANGED,
    language: str | Unchanged | None = UNCHANGED,
    now: datetime | None = None,
) -> Preferences:
    """Set what the user mutes (each given list replaces the current one), the
    digest choice, the channel choices of the categories given (each field
    given replaces that one), quiet hours (None: none) and the language (None:
    none chosen); None, or UNCHANGED for the last two, leaves that part as it is.

    Everything is checked before anything is written: an unknown category,
    message type code or digest is a 400 naming them, and nothing changes.
    Returns the stored preferences.
    """
    user_id = int(user.pk)
    categories = None if muted_categories is None else _muted_categories(muted_categories)
    types = None if muted_message_types is None else _muted_types(muted_message_types)
    if email_digest is not None:
        _digest_check(email_digest)
    changes = _PrefsChanges(
        email_digest=email_digest,
        channels=None if channels is None else _channels(channels),
        quiet=UNCHANGED if isinstance(quiet_hours, Unchanged) else _quiet_hours(quiet_hours),
        language=UNCHANGED if isinstance(language, Unchanged) else _language(language),
    )
    now_ms = to_ms(now or timezone.now())
    with part_writing(user_id), transaction.atomic():
        # The preferences row is the user's lock: two updates of one user run one after the other.
        prefs, _created = UserPreferences.objects.get_or_create(user_id=user_id)
        prefs = UserPreferences.objects.select_for_update().get(pk=prefs.pk)
        _prefs_apply(prefs, changes=changes, user_id=user_id)
        changed = False
        if categories is not None:
            changed |= _set_open(user_id, {("c", c): c for c in categories}, now_ms, kind="c")
        if types is not None:
            changed |= _set_open(user_id, {("t", pk): pk for pk in types.values()}, now_ms, kind="t")
        if changed:
            projection.user_mutes_changed([user_id])
    return preferences_get(user_id=user_id)


@dataclass(frozen=True)
class _PrefsChanges:
    """The checked changes to the preferences row; None or UNCHANGED leaves a field as it is."""

    email_digest: str | None
    channels: dict[str, dict[str, Any]] | None
    quiet: tuple[Any, Any, str] | Unchanged
    language: str | Unchanged


def _muted_categories(raw: Any) -> list[str]:
    """The categories to mute, each one known; an unknown one is a 400 naming it."""
    categories = _strings("muted_categories", raw, limit=MAX_MUTED_TYPES)
    unknown = [c for c in categories if c not in CATEGORIES]
    if unknown:
        raise ValidationFailed(
            f"Unknown categories: {', '.join(unknown)}. Choose from {', '.join(CATEGORIES)}.",
            code="unknown_category",
            fields={"muted_categories": [f"Unknown: {', '.join(unknown)}."]},
        )
    return categories


def _muted_types(raw: Any) -> dict[str, int]:
    """``{code: message type id}`` of the types to mute; an unknown code is a 400 naming it."""
    codes = _strings("muted_message_types", raw, limit=MAX_MUTED_TYPES)
    types = dict(MessageType.objects.filter(code__in=codes).values_list("code", "pk"))
    unknown = [c for c in codes if c not in types]
    if unknown:
        raise ValidationFailed(
            f"Unknown message types: {', '.join(unknown)}.",
            code="unknown_message_type",
            fields={"muted_message_types": [f"Unknown: {', '.join(unknown)}."]},
        )
    return types


def _digest_check(email_digest: str) -> None:
    """A digest choice outside ``EmailDigest`` is a 400 listing the choices."""
    if email_digest not in DIGESTS:
        raise ValidationFailed(
            f"Choose email_digest from {', '.join(DIGESTS)}.",
            code="invalid_choice",
            fields={"email_digest": [f"Choose from {', '.join(DIGESTS)}."]},
        )


def _prefs_apply(prefs: UserPreferences, *, changes: _PrefsChanges, user_id: int) -> None:
    """Write the checked changes onto the locked preferences row and save the
    fields given (the digest only when it differs): an update that gives none
    of them leaves the row, and its ``updated_at``, alone."""
    fields: list[str] = []
    if changes.email_digest is not None and prefs.email_digest != changes.email_digest:
        prefs.email_digest = changes.email_digest
        fields.append("email_digest")
    if changes.channels is not None:
        prefs.channels = channel_prefs.channels_merge(prefs.channels, changes.channels)
        fields.append("channels")
    if not isinstance(changes.quiet, Unchanged):
        prefs.quiet_start, prefs.quiet_end, prefs.quiet_timezone = changes.quiet
        fields += ["quiet_start", "quiet_end", "quiet_timezone"]
    if not isinstance(changes.language, Unchanged):
        prefs.language = changes.language
        fields.append("language")
        user_language_changed(user_id)
    if fields:
        prefs.save(update_fields=[*fields, "updated_at"])


def _channels(raw: Any) -> dict[str, dict[str, Any]]:
    """``{category: {"email"?: choice, "web_push"?: bool}}`` checked whole: an
    unknown category, field or value is a 400 naming it."""
    if not isinstance(raw, Mapping):
        raise ValidationFailed("channels must be an object.", fields={"channels": ["Must be an object."]})
    errors: dict[str, list[str]] = {}
    clean: dict[str, dict[str, Any]] = {}
    for category, fields in raw.items():
        if category not in CATEGORIES:
            errors[str(category)] = [f"Unknown category. Choose from {', '.join(CATEGORIES)}."]
            continue
        if not isinstance(fields, Mapping):
            errors[category] = ["Give an object with email and web_push."]
            continue
        unknown = sorted(set(fields) - set(channel_prefs.CHANNEL_FIELDS))
        email, web_push = fields.get("email"), fields.get("web_push")
        if unknown:
            errors[category] = [f"Unknown field(s): {', '.join(map(str, unknown))}."]
        elif "email" in fields and email not in channel_prefs.EMAIL_CHOICES:
            errors[category] = [f"email: choose from {', '.join(channel_prefs.EMAIL_CHOICES)}."]
        elif "web_push" in fields and not isinstance(web_push, bool):
            errors[category] = ["web_push must be true or false."]
        else:
            clean[category] = dict(fields)
    if errors:
        raise ValidationFailed("Unknown channel choices.", code="invalid_channels", fields={"channels": errors})
    return clean


def _quiet_hours(raw: Any) -> tuple[Any, Any, str]:
    """(start, end, zone name) from ``{"start": "HH:MM", "end": "HH:MM",
    "timezone": IANA name}``; None clears them. Anything else is a 400."""
    if raw is None:
        return None, None, ""
    if not isinstance(raw, Mapping) or set(raw) != {"start", "end", "timezone"}:
        raise ValidationFailed(
            "quiet_hours needs start, end and timezone (or null).",
            code="invalid_quiet_hours",
            fields={"quiet_hours": ["Give start, end (HH:MM) and timezone (an IANA name), or null."]},
        )
    errors: dict[str, list[str]] = {}
    start, end = parse_hhmm(raw["start"]), parse_hhmm(raw["end"])
    if start is None:
        errors["start"] = ["A time as HH:MM (00:00 to 23:59)."]
    if end is None:
        errors["end"] = ["A time as HH:MM (00:00 to 23:59)."]
    zone = raw["timezone"]
    if not isinstance(zone, str) or zone_of(zone) is None:
        errors["timezone"] = ["An IANA time zone name, such as Europe/Berlin."]
    if errors:
        raise ValidationFailed("Bad quiet hours.", code="invalid_quiet_hours", fields={"quiet_hours": errors})
    return start, end, str(zone)


def _language(raw: Any) -> str:
    """A code of settings.LANGUAGES (any letter case) as the settings spell it; None: ""."""
    if raw is None:
        return ""
    codes = {code.lower(): code for code, _name in settings.LANGUAGES}
    if not isinstance(raw, str) or raw.lower() not in codes:
        raise ValidationFailed(
            f"Choose language from {', '.join(codes.values())}, or null.",
            code="invalid_language",
            fields={"language": [f"Choose from {', '.join(codes.values())}, or null."]},
        )
    return codes[raw.lower()]


def _set_open(user_id: int, wanted: dict[tuple[str, Any], Any], now_ms: int, *, kind: str) -> bool:
    """Close the open periods (of one kind) no longer wanted, open the missing ones."""
    open_rows = MutePeriod.objects.filter(user_id=user_id, end_ms__isnull=True)
    open_rows = open_rows.filter(message_type__isnull=kind == "c")
    current = {
        (("t", type_id) if type_id is not None else ("c", category)): pk
        for pk, category, type_id in open_rows.values_list("pk", "category", "message_type_id")
    }
    ending = [pk for target, pk in current.items() if target not in wanted]
    starting = [target for target in wanted if target not in current]
    if ending:
        MutePeriod.objects.filter(pk__in=ending).update(end_ms=now_ms)
    MutePeriod.objects.bulk_create(
        [
            MutePeriod(
                user_id=user_id,
                category=value if kind == "c" else "",
                message_type_id=value if kind == "t" else None,
                start_ms=now_ms,
            )
            for (_kind, value) in starting
        ]
    )
    return bool(ending or starting)


def subscription_self_create(*, user: AbstractBaseUser, message_type: Any, scope: Any) -> Subscription:
    """The user follows a self-service message type in a scope. Unknown type:
    400; a type that is not self-service: 403; already following: 409."""
    code = message_type if isinstance(message_type, str) else None
    mtype = MessageType.objects.filter(code=code).first() if code else None
    if mtype is None:
        raise ValidationFailed(
            f"Unknown message type {message_type!r}.",
            code="unknown_message_type",
            fields={"message_type": [f"Unknown message type {message_type!r}."]},
        )
    if not mtype.self_service:
        raise PermissionDenied("This message type cannot be subscribed to by users themselves.")
    return subscription_create(message_type=mtype.code, scope=scope, user_id=int(user.pk))


def subscription_self_delete(*, user: AbstractBaseUser, subscription_id: int) -> None:
    """Stop one of the user's own subscriptions; anyone else's (or a group's) is a 404."""
    subscription = Subscription.objects.filter(pk=subscription_id, user_id=int(user.pk)).first()
    if subscription is None:
        raise NotFound("No such subscription of yours.")
    subscription_delete(subscription=subscription)


def channel_unsubscribe(*, token: str) -> AbstractBaseUser:
    """The one-click unsubscribe of a channel e-mail: its category's e-mails
    (every category's, for a summary) off for the token's user. Idempotent;
    a bad token is a 400 and changes nothing."""
    user, category = channel_token_user(token=token)
    categories = CATEGORIES if category == ALL_CATEGORIES else (category,)
    preferences_update(user=user, channels={c: {"email": channel_prefs.EMAIL_OFF} for c in categories})
    return user
