"""Bulletins: operator-configured, shown to user groups from their
display time until they expire, merged into each member's system list on read."""

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from core.api.errors import ValidationFailed
from core.api.translations import translations_validate
from core.html import sanitize_html
from messagecenter import projection
from messagecenter.models import Bulletin, InboxItemState, UserGroup
from messagecenter.services.slots import slot_allocate
from webhooks import services as webhooks


def _groups(group_ids: Iterable[int]) -> list[UserGroup]:
    wanted = {int(g) for g in group_ids}
    if not wanted:  # everyone: no query to build
        return []
    groups = list(UserGroup.objects.filter(pk__in=wanted))
    missing = sorted(wanted - {g.pk for g in groups})
    if missing:
        raise ValidationFailed(
            f"Unknown user group id(s): {', '.join(map(str, missing))}.",
            code="unknown_groups",
            fields={"user_groups": [f"Unknown id(s): {', '.join(map(str, missing))}."]},
        )
    return groups


def _check_times(display_time: datetime, expire_at: datetime | None) -> None:
    if expire_at is not None and expire_at <= display_time:
        raise ValidationFailed(
            "expire_at must be after display_time.", fields={"expire_at": ["Must be after display_time."]}
        )


def bulletin_create(
    *,
    title: str,
    body_html: str,
    display_time: datetime,
    expire_at: datetime | None = None,
    group_ids: Iterable[int] = (),
    actor: AbstractBaseUser | None = None,
    translations: Mapping[str, Any] | None = None,
) -> Bulletin:
    """Create a bulletin; no groups means everyone. Redis follows after commit (projection)."""
    _check_times(display_time, expire_at)
    groups = _groups(group_ids)
    localized = translations_validate(translations) if translations is not None else {}
    body = sanitize_html(body_html)
    # No savepoint: nothing inside is caught, so an error aborts the
    # caller's transaction as a whole (a publish is all or nothing either way).
    with transaction.atomic(savepoint=False):
        month, offset = slot_allocate(at=timezone.now())
        bulletin = Bulletin.objects.create(
            title=title,
            body_html=body,
            display_time=display_time,
            expire_at=expire_at,
            created_by=actor if actor is not None and actor.is_authenticated else None,  # type: ignore[misc]
            slot_month=month,
            slot_offset=offset,
            translations=localized,
        )
        if groups:  # a new bulletin has none: add() without set()'s SELECT of the current ones
            bulletin.groups.add(*groups)
        # The whole state of the new bulletin: the projection's run at commit
        # writes Redis from it instead of reloading (the receivers' requests
        # of the insert and the groups coalesce into that run).
        projection.bulletin_created(bulletin, group_ids=[g.pk for g in groups])
        webhooks.webhook_emit(
            event="bulletin.published",
            data={
                "id": str(bulletin.pk),
                "title": bulletin.title,
                "display_time": bulletin.display_time.isoformat(),
                "user_groups": [str(g.pk) for g in groups],
            },
        )
    return bulletin


def _user_states_dropped(bulletin: Bulletin) -> None:
    """A bulletin moved to show later comes again, as new, when that time
    comes: what users did with its earlier showing (archived it, snoozed it)
    no longer applies. Their rows go, and after commit their inboxes free it
    (the edit itself takes it out of every inbox until then)."""
    rows = InboxItemState.objects.filter(item_id=bulletin.ref)
    user_ids = list(rows.values_list("user_id", flat=True))
    rows.delete()
    projection.item_places_freed([(user_id, bulletin.ref) for user_id in user_ids])


def bulletin_update(
    *, bulletin: Bulletin, data: dict[str, Any], actor: AbstractBaseUser | None = None
) -> tuple[Bulletin, list[str]]:
    """Apply the given fields (title, body_html, display_time, expire_at,
    translations, group_ids); returns the bulletin and the names of the fields
    that changed. Users' archive and snooze of it stay, unless the display
    time moves ahead. ``translations`` replaces them all ({} drops them)."""
    changed: list[str] = []
    if "translations" in data:
        localized = translations_validate(data["translations"])
        if localized != (bulletin.translations or {}):
            bulletin.translations = localized
            changed.append("translations")
    for name in ("title", "body_html", "display_time", "expire_at"):
        if name in data:
            value = sanitize_html(data[name]) if name == "body_html" else data[name]
            if getattr(bulletin, name) != value:
                setattr(bulletin, name, value)
                changed.append(name)
    _check_times(bulletin.display_time, bulletin.expire_at)
    groups = _groups(data["group_ids"]) if "group_ids" in data else None
    with transaction.atomic():
        if changed:
            bulletin.save()
            if "display_time" in changed and bulletin.display_time > timezone.now():
                _user_states_dropped(bulletin)
        if groups is not None and {g.pk for g in groups} != set(bulletin.groups.values_list("pk", flat=True)):
            bulletin.groups.set(groups)
            changed.append("user_groups")
    return bulletin, changed


def bulletin_delete(*, bulletin: Bulletin, actor: AbstractBaseUser | None = None) -> None:
    """Delete; it leaves every inbox at once (removal settled on each read)."""
    bulletin.delete()
