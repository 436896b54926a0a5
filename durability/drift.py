"""Drift between PostgreSQL (the truth) and the Redis read model: find it, mend it.

Each app declares its checks (``DriftCheck``) and names them on its
AppConfig (``drift_checks``; ``core.contributions``): core names no app.
``check_run`` runs them in INSTALLED_APPS order, optionally repairs what
each found, checks again and records a ``RedisCheckRun``. A repair re-runs
the idempotent mirror or sync of exactly the things that drifted, never a
flush, so it is safe while the site serves. ``manage.py check_redis``, the
admin's "Run check now" (the task ``core.check_redis``) and the replay of a
projection whose process died with more keys than its record holds
(``durability.projection``) all come here.

An item written while a check runs may show as drift once (the check read
PostgreSQL before the mirror landed); the repair of such an item is a no-op
rewrite of the same state, and the re-check after a repair sees it clean.
"""

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.utils import timezone
from redis.exceptions import RedisError

from core import readmodel
from core.contributions import contributed_each
from durability.models import RedisCheckRun

logger = logging.getLogger(__name__)

# Findings kept on a run row (all are counted): a flushed Redis can drift
# by millions of keys, and the admin only needs enough to see the pattern.
STORED_FINDINGS = 200
# Runs older than this are deleted when a new one is recorded: the beat job
# adds ~100 a day, and the history only needs to show recent trends.
RUNS_KEPT = timedelta(days=90)


@dataclass(frozen=True)
class Finding:
    """One drifted thing: ``key`` the Redis key, ``member`` the member or field within
    it ("" when the whole key is concerned), ``detail`` what is wrong, in words.

    ``fix`` is what the area's repair needs (ids, entries); it is never stored.
    (area, key, member) identifies the finding across a check and its re-check.
    """

    area: str
    key: str
    detail: str
    member: str = ""
    fix: Any = field(default=None, compare=False, repr=False)

    @property
    def ident(self) -> tuple[str, str, str]:
        return (self.area, self.key, self.member)

    def as_json(self, *, repaired: bool) -> dict[str, Any]:
        return {"area": self.area, "key": self.key, "member": self.member, "detail": self.detail, "repaired": repaired}


@dataclass(frozen=True)
class DriftCheck:
    """One area: ``find`` compares PostgreSQL with Redis, ``repair`` mends the findings
    ``find`` returned (re-running the mirrors of just those things)."""

    area: str
    description: str
    find: Callable[[], list[Finding]]
    repair: Callable[[Sequence[Finding]], None]


class UnknownArea(ValueError):
    pass


def drift_checks() -> dict[str, DriftCheck]:
    """Every app's checks (their AppConfig's ``drift_checks``) by area, in running
    order: INSTALLED_APPS order, each app's in its own order."""
    return {check.area: check for check in contributed_each("drift_checks")}


@dataclass
class AreaResult:
    area: str
    found: list[Finding]
    # After a repair: what the re-check still found (None: no repair ran).
    remaining: list[Finding] | None = None

    @property
    def repaired(self) -> list[Finding]:
        if self.remaining is None:
            return []
        left = {f.ident for f in self.remaining}
        return [f for f in self.found if f.ident not in left]

    @property
    def still_drifted(self) -> int:
        return len(self.found) if self.remaining is None else len(self.remaining)


@dataclass
class CheckResult:
    run: RedisCheckRun
    areas: list[AreaResult]
    error: str = ""

    @property
    def drift_count(self) -> int:
        return sum(len(a.found) for a in self.areas)

    @property
    def repaired_count(self) -> int:
        return sum(len(a.repaired) for a in self.areas)

    @property
    def remaining_count(self) -> int:
        return sum(a.still_drifted for a in self.areas)


def _selected(areas: Sequence[str] | None) -> list[DriftCheck]:
    checks = drift_checks()
    if not areas:
        return list(checks.values())
    unknown = [a for a in areas if a not in checks]
    if unknown:
        raise UnknownArea(f"Unknown area(s): {', '.join(unknown)}. Choose from {', '.join(checks)}.")
    return [check for area, check in checks.items() if area in areas]


def _stored_findings(results: Sequence[AreaResult]) -> list[dict[str, Any]]:
    stored: list[dict[str, Any]] = []
    for result in results:
        repaired = {f.ident for f in result.repaired}
        for finding in result.found:
            if len(stored) >= STORED_FINDINGS:
                return stored
            stored.append(finding.as_json(repaired=finding.ident in repaired))
    return stored


def check_run(*, repair: bool, areas: Sequence[str] | None = None) -> CheckResult:
    """Check the chosen areas (all by default); with ``repair``, mend and check again.

    Always records a ``RedisCheckRun``. Redis unreachable (before or during the
    run) ends the run with ``error`` set and no traceback; raises ``UnknownArea``
    for an area no app declares, before anything runs.
    """
    checks = _selected(areas)
    run = RedisCheckRun(started_at=timezone.now(), repair=repair)
    results: list[AreaResult] = []
    error = ""
    try:
        readmodel.health_probe()  # fail fast, before any PostgreSQL work, when Redis is away
        for check in checks:
            result = AreaResult(area=check.area, found=check.find())
            if repair and result.found:
                check.repair(result.found)
                result.remaining = check.find()
            results.append(result)
    except RedisError as exc:
        error = f"Redis unreachable: {exc}"
        logger.warning("check_redis stopped: %s", error)
    except Exception as exc:
        # A bug in a check: the run row says so, then the caller sees the traceback.
        _save(run, results, error=f"Check failed: {type(exc).__name__}: {exc}")
        raise
    _save(run, results, error=error)
    return CheckResult(run=run, areas=results, error=error)


def _save(run: RedisCheckRun, results: Sequence[AreaResult], *, error: str) -> None:
    run.finished_at = timezone.now()
    run.drift_count = sum(len(r.found) for r in results)
    run.repaired_count = sum(len(r.repaired) for r in results)
    run.findings = _stored_findings(results)
    run.error = error
    run.save()
    RedisCheckRun.objects.filter(started_at__lt=run.started_at - RUNS_KEPT).delete()


def check_run_last() -> RedisCheckRun | None:
    """The newest run (redischeckrun_started_idx), for the admin's index panel."""
    return RedisCheckRun.objects.order_by("-started_at", "-id").first()
