"""Drift check of the announcement indexes (registered with ``durability.drift``).

Every built chunk of a platform holds the same index: the platform's
announcements PostgreSQL has not seen expire (publish ms in the index zset,
expiry ms in the expiry zset). An id whose announcement has expired since
the last sync is no drift: reads filter by time and the periodic sync
prunes it. The repair is ``platform_sync`` of each drifted platform, with
the bitmaps of announcements gone from the platform dropped on the way.
"""

from collections.abc import Sequence

from django.utils import timezone

from accounts.platforms import ALL_PLATFORMS
from durability.drift import DriftCheck, Finding
from notices import keys as notice_keys
from notices import projection, readmodel
from notices.models import Announcement

AREA = "announcements"


def _expired_on_platform(*, platform: str, ids: set[int]) -> set[int]:
    """Those of ``ids`` that are on ``platform`` but expired (left in an index until the next sync)."""
    if not ids:
        return set()
    return set(
        Announcement.objects.filter(
            pk__in=ids, platform_rows__platform=platform, expire_at__lte=timezone.now()
        ).values_list("pk", flat=True)
    )


def _platform_findings(platform: str) -> list[Finding]:
    # PostgreSQL first: an announcement committed between the two reads is
    # then in Redis already (or shows as drift once, mended by a no-op sync).
    entries = readmodel.drift_platform_entries(platform=platform)
    want_index = {pk: publish_ms for pk, publish_ms, _ in entries}
    want_expiry = {pk: expire_ms for pk, _, expire_ms in entries if expire_ms is not None}
    findings: list[Finding] = []
    for chunk, (index, expiry) in readmodel.drift_chunk_indexes(platform=platform).items():
        stale = set(index) - set(want_index)
        benign = _expired_on_platform(platform=platform, ids=stale | (set(expiry) - set(want_expiry)))
        # Ids to drop bitmaps of: not on the platform any more (deleted or moved).
        gone = sorted((stale | set(expiry) - set(want_expiry)) - benign)
        problems = _chunk_problems(
            index=index, expiry=expiry, want_index=want_index, want_expiry=want_expiry, benign=benign, gone=gone
        )
        if problems:
            findings.append(
                Finding(
                    area=AREA,
                    key=notice_keys.index(platform, chunk),
                    detail="; ".join(problems),
                    fix=(platform, tuple(gone)),
                )
            )
    return findings


def _chunk_problems(
    *,
    index: dict[int, int],
    expiry: dict[int, int],
    want_index: dict[int, int],
    want_expiry: dict[int, int],
    benign: set[int],
    gone: Sequence[int],
) -> list[str]:
    """What one chunk's index and expiry zsets get wrong against PostgreSQL
    (id -> ms each); ``benign`` ids expired since the last sync and are no
    drift, ``gone`` ids are no longer on the platform."""
    problems: list[str] = []
    missing = sorted(set(want_index) - set(index))
    if missing:
        problems.append(f"missing {_ids(missing)}")
    if gone:
        problems.append(f"stale {_ids(gone)}")
    moved = sorted(pk for pk, ms in want_index.items() if pk in index and index[pk] != ms)
    if moved:
        problems.append(f"wrong publish time of {_ids(moved)}")
    wrong_expiry = sorted(
        pk for pk in set(want_index) if pk in index and expiry.get(pk) != want_expiry.get(pk) and pk not in benign
    )
    if wrong_expiry:
        problems.append(f"wrong expiry of {_ids(wrong_expiry)}")
    return problems


def _ids(ids: Sequence[int], shown: int = 10) -> str:
    text = ", ".join(f"#{pk}" for pk in ids[:shown])
    return text + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


def announcements_find() -> list[Finding]:
    findings: list[Finding] = []
    for platform in ALL_PLATFORMS:
        findings.extend(_platform_findings(platform))
    return findings


def announcements_repair(findings: Sequence[Finding]) -> None:
    drops: dict[str, set[int]] = {}
    for finding in findings:
        platform, gone = finding.fix
        drops.setdefault(platform, set()).update(gone)
    for platform, gone in drops.items():
        # One sync rebuilds every built chunk of the platform from PostgreSQL.
        projection.platform(platform, sorted(gone))


CHECKS = [
    DriftCheck(
        area=AREA,
        description="announcement index and expiry zsets of every platform and built chunk",
        find=announcements_find,
        repair=announcements_repair,
    ),
]
