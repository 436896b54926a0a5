"""The full rebuild of the read model from PostgreSQL, run by a healing process or by hand.

Each app names the step that restores its part on its AppConfig
(``rebuild_step``, a ``RebuildStep``; ``core.contributions``); ``rebuild`` runs them all under one lock (every
acknowledged write is committed in PostgreSQL, so the steps restore it), then
applies the outbox on top, and only then writes the new
generation that ``durability.healing`` looks for. ``manage.py rebuild_redis`` and
the healer thread of ``durability.healing`` both come here.
"""

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import connection, transaction
from django.utils import timezone

from core.contributions import contributed
from core.redis import get_redis, prefix_drop
from durability import healing, outbox
from durability.keys import readmodel_generation
from durability.models import ReadModelState
from durability.progress import SILENT, Progress

logger = logging.getLogger(__name__)

# pg_advisory_lock key of the rebuild: any bigint unique to this purpose.
LOCK_KEY = 0x6D63_7265_6275_696C  # "mcrebuil"


# --- The rebuild steps of the apps ------------------------------------------------------


@dataclass(frozen=True)
class RebuildStep:
    """An app's step of the rebuild: ``run(progress)`` restores the app's part of
    the read model from PostgreSQL, idempotent and safe while serving, and
    answers what it touched. Lower ``order`` runs first."""

    name: str
    order: int
    run: Callable[[Progress], dict[str, int] | None]


def rebuild_steps() -> list[RebuildStep]:
    """The apps' steps (their AppConfig's ``rebuild_step``), in running order."""
    return sorted(contributed("rebuild_step"), key=lambda step: (step.order, step.name))


# --- The rebuild ---------------------------------------------------------------------------

_local_lock = threading.Lock()  # embedded (SQLite): one process, so a lock in it will do


@contextmanager
def _rebuild_lock(*, wait: bool) -> Iterator[bool]:
    if connection.vendor != "postgresql":
        acquired = _local_lock.acquire(blocking=wait)
        try:
            yield acquired
        finally:
            if acquired:
                _local_lock.release()
        return
    # A session lock on this thread's connection: a process that dies mid-rebuild
    # loses its connection, and the lock with it.
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)" if wait else "SELECT pg_try_advisory_lock(%s)", [LOCK_KEY])
        row = cursor.fetchone()
    acquired = bool(row[0]) if wait is False and row else True
    try:
        yield acquired
    finally:
        if acquired:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])


@dataclass(frozen=True)
class RebuildResult:
    generation: int
    seconds: float
    steps: dict[str, dict[str, int] | None]
    outbox: int


def rebuild(*, progress: Progress = SILENT, wait: bool = True, only_if_needed: bool = False) -> RebuildResult | None:
    """Rebuild the whole read model from PostgreSQL and write a new generation.

    Holds the rebuild lock throughout (``wait``: block for it; else return
    None when another process holds it). ``only_if_needed``: do nothing (None)
    when, once the lock is held, Redis turns out ready (another rebuild just
    ended). Safe while serving: every step only adds what is missing.
    """
    with _rebuild_lock(wait=wait) as acquired:
        if not acquired:
            return None
        stored = healing.stored_generation()
        held, generation_held = healing.marker_read()
        intact = stored > 0 and generation_held == stored
        if only_if_needed and intact:
            return None
        # A copy (a restart from a dump, a promoted replica) may hold what
        # PostgreSQL has undone since; the steps only add, so it goes first.
        # Every process answers from PostgreSQL meanwhile (not ready), and users'
        # parts are filled again on their next read either way.
        copy = not intact and held is not None
        started = time.monotonic()
        ReadModelState.objects.update_or_create(
            pk=1,
            defaults={
                "rebuilding": True,
                "started_at": timezone.now(),
                "finished_at": None,
                "last_error": "",
            },
        )
        if not intact and stored > 0 and healing.enabled():
            # Every process learns that the read model is not ready within a
            # check interval, and from then on keeps its projections in the
            # outbox (drained below, after the steps) instead of writing them
            # beside steps that may have read an older state. Only then read.
            # (Before the first rebuild no process ever found it ready.)
            time.sleep(healing.check_interval())
        try:
            results: dict[str, dict[str, int] | None] = {}
            if copy:
                with progress.stage("an older copy emptied", 1) as stage:
                    results["copy"] = {"keys dropped": prefix_drop()}
                    stage.advance()
            for step in rebuild_steps():
                results[step.name] = step.run(progress)
            pending = _drain_outbox(progress)
            with transaction.atomic():
                # A rebuild of an intact Redis keeps its number (running it
                # twice changes nothing); one that refilled a lost or stale
                # Redis takes a new one, which older copies of Redis lack.
                generation = stored if intact else stored + 1
                ReadModelState.objects.filter(pk=1).update(
                    generation=generation,
                    rebuilding=False,
                    finished_at=timezone.now(),
                    last_seconds=time.monotonic() - started,
                )
            get_redis().set(readmodel_generation(), healing.marker_value(generation))
            healing.adopt(generation)
            # Marks queued between the last drain and the marker: applied now
            # (beat would within seconds too).
            pending += outbox.replay(limit=10_000)
        except BaseException as exc:
            ReadModelState.objects.filter(pk=1).update(
                rebuilding=False, last_error=f"{type(exc).__name__}: {exc}"[:2000], finished_at=timezone.now()
            )
            raise
        seconds = time.monotonic() - started
        logger.info("read model rebuilt in %.1fs (generation %s)", seconds, generation)
        return RebuildResult(generation, seconds, results, pending)


def _drain_outbox(progress: Progress) -> int:
    """Replay the outbox until it is empty, or stops shrinking (Redis failed, or
    entries that keep failing): marks keep arriving there while the marker is missing."""

    applied = 0
    with progress.stage("outbox", outbox.pending_count()) as stage:
        for _ in range(100):
            done = outbox.replay(limit=10_000, while_rebuilding=True)
            applied += done
            stage.advance(done)
            if done == 0 or outbox.pending_count() == 0:
                break
    return applied


def heal() -> None:
    """The healer thread's work (``durability.healing``): rebuild unless another process does,
    or already did."""
    rebuild(wait=False, only_if_needed=True)
