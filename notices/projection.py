"""The announcements' read-model writes for model changes: the one path to Redis.

Two projections. ``notices.summary`` replaces the list's cached summary of
an announcement (``keys.notice_summary``) by a tombstone after any commit
that changed its title, summary, publish time or pin, or deleted it; the
next list fills it again from PostgreSQL.

Each platform's indexes (publish-time and expiry zsets per chunk of users)
are written only from here. Two ways in:

- *now*: ``platform`` rebuilds a platform's indexes from PostgreSQL
  (idempotent; tasks, the outbox replay, the periodic rebuild and the drift
  repair call it);
- *after commit*: ``announcement_changed``, ``platform_row_added`` and
  ``platform_row_removed`` (the receivers in ``notices.signals``, one line
  each) and ``announcement_created`` (the service) go through
  ``durability.projection.project``: one run per platform per transaction, after
  commit, and into the outbox if Redis fails then.

Keys are ``(platform, announcement id, dropped)``; the run of one platform
rebuilds it once, dropping the bitmaps of the ids taken off it. The one
shortcut: ``announcement_create`` passes the new announcement's entry (and
the platform revision this process saw before the commit, the fence of
``readmodel.platform_add``) as facts, so the run adds the entry instead of
rebuilding. The receivers' requests for the rows it inserted coalesce with
it; any later change of the announcement in the same transaction asks again
without facts, and the run rebuilds (the last request decides, see
``durability.projection``).
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from core import readthrough
from durability import projection
from live import transport as live
from notices import keys as notice_keys
from notices import readmodel
from notices.models import Announcement, AnnouncementPlatform

PLATFORMS = "notices.platform"
SUMMARIES = "notices.summary"


@dataclass(frozen=True)
class NewEntry:
    """A new announcement's index entry, and the platform revision seen before its commit."""

    entry: readmodel.Entry
    seen: int | None


# --- now --------------------------------------------------------------------------------


def platform(platform: str, drop_ids: Iterable[int] = ()) -> None:
    """Rebuild ``platform``'s indexes from PostgreSQL, dropping the bitmaps of ``drop_ids``."""
    readmodel.platform_sync(platform=platform, drop_ids=[int(i) for i in drop_ids])


def _run_platforms(keys: list[Any], facts: Mapping[Any, Any]) -> None:
    by_platform: dict[str, list[Any]] = {}
    for key in keys:
        by_platform.setdefault(str(key[0]), []).append(key)
    for name, platform_keys in by_platform.items():
        drops = [int(pk) for _, pk, dropped in platform_keys if dropped]
        if not drops and all(key in facts for key in platform_keys):
            for key in platform_keys:
                new: NewEntry = facts[key]
                readmodel.platform_add(platform=name, entry=new.entry, seen=new.seen)
                # The platform's open pages hear of it at its publish time.
                live.broadcast(scope=name, reason="announcement", ref=f"a{new.entry[0]}", at_ms=new.entry[1])
        else:
            platform(name, drops)
            # An edit or a removal: the platform's open pages refetch now.
            live.broadcast(scope=name, reason="announcement")


# A run Redis refused is kept in the outbox under ``notices.platform_sync``,
# one entry per platform; ``replay_platform_sync`` rebuilds it.
PLATFORM_SYNC_TOPIC = "notices.platform_sync"


def _payloads(keys: list[Any], facts: Mapping[Any, Any]) -> list[dict[str, Any]]:
    drops: dict[str, list[int]] = {}
    for name, pk, dropped in keys:
        drops.setdefault(str(name), [])
        if dropped:
            drops[str(name)].append(int(pk))
    return [{"platform": name, "drop_ids": ids} for name, ids in drops.items()]


def replay_platform_sync(payload: dict[str, Any], user_id: int | None) -> None:
    """Outbox handler of ``notices.platform_sync``: the rebuild reads PostgreSQL (idempotent)."""
    platform(str(payload["platform"]), payload["drop_ids"])


# A summary drop Redis refused: ``{"ids": [int]}``; ``replay_summary_drop`` retries it.
SUMMARY_TOPIC = "notices.summary_drop"


def _drop_summaries(keys: list[Any], facts: Mapping[Any, Any]) -> None:
    readthrough.invalidate(*(notice_keys.summary(int(pk)) for pk in keys))


def _summary_payloads(keys: list[Any], facts: Mapping[Any, Any]) -> list[dict[str, Any]]:
    return [{"ids": [int(pk) for pk in keys]}]


def replay_summary_drop(payload: dict[str, Any], user_id: int | None) -> None:
    """Outbox handler of ``notices.summary_drop``."""
    _drop_summaries(list(payload["ids"]), {})


# The app's projections and the outbox handlers of their failed runs (its AppConfig names both).
PROJECTIONS = {
    # A lost run of the platforms' indexes is found and mended by their drift
    # area; a summary a lost run did not drop expires with its entry.
    PLATFORMS: projection.Projection(
        runner=_run_platforms, topic=PLATFORM_SYNC_TOPIC, payloads=_payloads, area="announcements"
    ),
    SUMMARIES: projection.Projection(runner=_drop_summaries, topic=SUMMARY_TOPIC, payloads=_summary_payloads),
}
OUTBOX_HANDLERS = {PLATFORM_SYNC_TOPIC: replay_platform_sync, SUMMARY_TOPIC: replay_summary_drop}


# --- after commit -------------------------------------------------------------------------


def announcement_changed(announcement: Announcement) -> None:
    """Its times changed: every platform it is on rebuilds."""
    rows = AnnouncementPlatform.objects.filter(announcement=announcement).values_list("platform", flat=True)
    projection.project(PLATFORMS, [(p, int(announcement.pk), False) for p in rows])


def summary_changed(announcement_id: int) -> None:
    """What a list shows of it changed, or it was deleted."""
    projection.project(SUMMARIES, [int(announcement_id)])


def platform_row_added(row: AnnouncementPlatform) -> None:
    projection.project(PLATFORMS, [(row.platform, int(row.announcement_id), False)])


def platform_row_removed(row: AnnouncementPlatform) -> None:
    # Also each row of a deleted announcement (cascade).
    projection.project(PLATFORMS, [(row.platform, int(row.announcement_id), True)])


def announcement_created(announcement: Announcement, *, platforms: Iterable[str]) -> None:
    """``announcement_create`` inserted it with exactly these platform rows:
    the run at commit adds its entry instead of rebuilding the platforms."""
    entry: readmodel.Entry = (
        int(announcement.pk),
        readmodel.to_ms(announcement.publish_at),
        readmodel.to_ms(announcement.expire_at) if announcement.expire_at is not None else None,
    )
    facts = {
        # Read now, before the commit: the add's fence (see readmodel.platform_add).
        (p, entry[0], False): NewEntry(entry=entry, seen=readmodel.platform_revision_seen(platform=p))
        for p in platforms
    }
    projection.project(PLATFORMS, list(facts), facts=facts)
