"""The read model heals itself: a lost or stale Redis is noticed and rebuilt, while serving.

Redis is a read model of PostgreSQL. When it loses its data (a crash without
persistence, FLUSHALL, a failover to an empty replica) or comes back with an
older copy (a failover to a stale replica), nothing fails: Redis simply
answers "nothing here". So a full rebuild ends by writing a generation
number to Redis (``keys.readmodel_generation``) after recording it in
PostgreSQL (``ReadModelState``):

- **Detection.** ``ready()`` reads the marker at most every
  ``MESSAGECENTER_HEALING_CHECK_SECONDS`` per process (one GET; the answer
  is held in between, so a request pays nothing). The marker missing, or a
  number other than PostgreSQL's, means the read model is lost or stale.
  PostgreSQL is asked only when the marker shows a number this process has
  not seen (after a rebuild, or on a stale replica). After any Redis
  connection failure the next call looks afresh: a Redis that was down may
  be back empty.
- **Serving meanwhile.** Callers treat "not ready" like Redis being down
  (``require_ready`` raises ``ReadModelNotReady``, a RedisError): reads answer
  from PostgreSQL, marks are kept in the outbox. A 404 computed from Redis is
  double-checked with a fresh read of the marker (``confirm_ready``), so the
  moments between a loss and its detection give no false 404.
- **Rebuild.** The process that notices starts a thread that takes a
  PostgreSQL advisory lock (Redis may be what was lost, and the Celery broker
  with it), so one rebuild runs however many processes notice; the others
  keep serving from PostgreSQL. It runs every app's registered step
  (``register_rebuild`` in ``AppConfig.ready``), then the marks journal, then
  the outbox, and only then writes the new generation. The embedded
  (SQLite, one process) setup uses a lock in the process instead.

``/healthz`` says ``"redis": "rebuilding"`` with the progress (``health``).
"""

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from redis.exceptions import RedisError

from core import breaker, keys
from core.progress import SILENT, Progress, Stage
from core.redis import get_redis

logger = logging.getLogger(__name__)

# pg_advisory_lock key of the rebuild: any bigint unique to this purpose.
LOCK_KEY = 0x6D63_7265_6275_696C  # "mcrebuil"
# How often the progress of a running rebuild is written to PostgreSQL (/healthz reads it).
PROGRESS_SECONDS = 0.5


class ReadModelNotReady(RedisError):
    """Redis answers but the read model is lost or being rebuilt: use PostgreSQL."""


# --- The rebuild steps of the apps ------------------------------------------------------

RebuildStep = Callable[[Progress], dict[str, int] | None]


@dataclass(frozen=True)
class _Step:
    name: str
    order: int
    run: RebuildStep


_steps: dict[str, _Step] = {}


def register_rebuild(name: str, step: RebuildStep, *, order: int = 100) -> None:
    """Name a function (``step(progress)``) that rebuilds an app's part of the read model
    from PostgreSQL; idempotent and safe while serving. Lower ``order`` runs first."""
    _steps[name] = _Step(name, order, step)


def unregister_rebuild(name: str) -> None:
    _steps.pop(name, None)


def registered_steps() -> list[str]:
    return [step.name for step in sorted(_steps.values(), key=lambda s: (s.order, s.name))]


def enabled() -> bool:
    return bool(getattr(settings, "MESSAGECENTER_SELF_HEALING", True))


# --- Detection (process-local, cheap) ---------------------------------------------------

_state: dict[str, Any] = {"checked_at": -1e18, "ready": True, "generation": None, "failures": 0}
_state_lock = threading.Lock()


def _check_seconds() -> float:
    return float(getattr(settings, "MESSAGECENTER_HEALING_CHECK_SECONDS", 1.0))


def _stored_generation() -> int:
    from core.models import ReadModelState

    row = ReadModelState.objects.filter(pk=1).values_list("generation", flat=True).first()
    return int(row or 0)


def _marker() -> int | None:
    raw = get_redis().get(keys.readmodel_generation())
    return None if raw is None else int(raw)


def check(*, fresh: bool = False) -> bool:
    """Whether Redis holds the read model PostgreSQL last filled it with (see the module).

    Raises RedisError when Redis does not answer (callers already handle that).
    When it answers "no", a rebuild is started (``heal_soon``).
    """
    if not enabled():
        return True
    now = time.monotonic()
    failed = breaker.failures[0]
    if not fresh and now - _state["checked_at"] < _check_seconds() and failed == _state["failures"]:
        return bool(_state["ready"])
    try:
        marker = _marker()
    except RedisError:
        _state["checked_at"] = -1e18  # look again as soon as it answers: it may come back empty
        raise
    _state["failures"] = failed
    if marker is not None and marker != _state["generation"]:
        # A number this process has not seen: another process's rebuild, or a stale replica.
        _state["generation"] = _stored_generation()
    ready = marker is not None and marker == _state["generation"]
    was_ready = _state["ready"]
    _state["checked_at"], _state["ready"] = now, ready
    if not ready:
        if was_ready:
            logger.warning("redis read model lost or stale (marker %s, expected %s)", marker, _state["generation"])
        heal_soon()
    elif not was_ready:
        # Marks were queued meanwhile by every process: the outbox's "nothing
        # pending" memory of this process is out of date.
        from core import outbox

        outbox.forget_local_state()
    return ready


def ready() -> bool:
    """``check`` at most once per check interval; in between, the last answer."""
    return check()


def require_ready() -> None:
    """Raise ``ReadModelNotReady`` unless the read model is ready (RedisError if Redis is down)."""
    if not check():
        raise ReadModelNotReady("the Redis read model is being rebuilt")


def confirm_ready() -> None:
    """``require_ready`` with a fresh look at the marker: before answering 404 from Redis."""
    if not check(fresh=True):
        raise ReadModelNotReady("the Redis read model is being rebuilt")


def forget() -> None:
    """Drop the process's memory of the last check and healing attempt (tests)."""
    _state.update(checked_at=-1e18, ready=True, generation=None, failures=0)
    _healer["next"] = 0.0


# --- Healing in the background ---------------------------------------------------------

_healer: dict[str, Any] = {"thread": None, "next": 0.0}


def heal_soon() -> None:
    """Start a rebuild in a thread of this process unless one runs here already (it
    only rebuilds if it wins the lock and the read model is still not ready)."""
    now = time.monotonic()
    with _state_lock:
        thread = _healer["thread"]
        if (thread is not None and thread.is_alive()) or now < _healer["next"]:
            return
        _healer["next"] = now + _check_seconds()
        thread = threading.Thread(target=_heal, name="readmodel-healer", daemon=True)
        _healer["thread"] = thread
        thread.start()


def _heal() -> None:
    try:
        rebuild(wait=False, only_if_needed=True)
    except Exception:
        logger.exception("read model rebuild failed; the next check starts another")
    finally:
        connection.close()  # this thread's own connection (and any session lock on it)


def healer_thread() -> threading.Thread | None:
    """The rebuild thread this process started last (tests wait for it)."""
    return _healer["thread"]


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
    journal: int
    outbox: int


def rebuild(*, progress: Progress = SILENT, wait: bool = True, only_if_needed: bool = False) -> RebuildResult | None:
    """Rebuild the whole read model from PostgreSQL and write a new generation.

    Holds the rebuild lock throughout (``wait``: block for it; else return
    None when another process holds it). ``only_if_needed``: do nothing (None)
    when, once the lock is held, Redis turns out ready (another rebuild just
    ended). Safe while serving: every step only adds what is missing.
    """
    from core import journal, outbox
    from core.models import ReadModelState

    with _rebuild_lock(wait=wait) as acquired:
        if not acquired:
            return None
        stored = _stored_generation()
        intact = stored > 0 and _marker() == stored
        if only_if_needed and intact:
            return None
        started = time.monotonic()
        ReadModelState.objects.update_or_create(
            pk=1,
            defaults={
                "rebuilding": True,
                "stage": "",
                "done": 0,
                "total": 0,
                "started_at": timezone.now(),
                "finished_at": None,
                "last_error": "",
            },
        )
        recorded = _RecordedProgress(progress)
        try:
            results: dict[str, dict[str, int] | None] = {}
            for step in sorted(_steps.values(), key=lambda s: (s.order, s.name)):
                results[step.name] = step.run(recorded)
            # Marks made just before the loss may still sit in a process's
            # journal buffer: give every process one flush before reading it.
            journal.flush()
            remaining = 2 * journal.flush_seconds() - (time.monotonic() - started)
            if remaining > 0:
                time.sleep(remaining)
            replayed = journal.replay(progress=recorded)
            pending = _drain_outbox(recorded)
            with transaction.atomic():
                # A rebuild of an intact Redis keeps its number (running it
                # twice changes nothing); one that refilled a lost or stale
                # Redis takes a new one, which older copies of Redis lack.
                generation = stored if intact else stored + 1
                ReadModelState.objects.filter(pk=1).update(
                    generation=generation,
                    rebuilding=False,
                    stage="",
                    finished_at=timezone.now(),
                    last_seconds=time.monotonic() - started,
                )
            get_redis().set(keys.readmodel_generation(), generation)
            _state.update(generation=generation, checked_at=-1e18)
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
        return RebuildResult(generation, seconds, results, replayed, pending)


def _drain_outbox(progress: Progress) -> int:
    """Replay the outbox until it is empty, or stops shrinking (Redis failed, or
    entries that keep failing): marks keep arriving there while the marker is missing."""
    from core import outbox

    applied = 0
    with progress.stage("outbox", outbox.pending_count()) as stage:
        for _ in range(100):
            done = outbox.replay(limit=10_000, while_rebuilding=True)
            applied += done
            stage.advance(done)
            if done == 0 or outbox.pending_count() == 0:
                break
    return applied


class _RecordedStage(Stage):
    """A stage that also drives the caller's stage (``inner``) and is written down."""

    def __init__(self, progress: "_RecordedProgress", name: str, total: int) -> None:
        self.recorder = progress
        self.inner = progress.inner.stage(name, total)
        super().__init__(progress, name, total)
        progress.record(self, force=True)

    def advance(self, amount: int = 1) -> None:
        super().advance(amount)
        self.inner.advance(amount)
        self.recorder.record(self)

    def done(self) -> None:
        super().done()
        self.inner.done()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.done()
        else:
            self.inner.__exit__(exc_type, exc, traceback)


class _RecordedProgress(Progress):
    """Passes stages on to ``inner`` (a command's bar) and writes them to ``ReadModelState``."""

    def __init__(self, inner: Progress) -> None:
        super().__init__(None)
        self.inner = inner
        self._written_at = 0.0

    def stage(self, name: str, total: int) -> Stage:
        return _RecordedStage(self, name, total)

    def record(self, stage: Stage, *, force: bool = False) -> None:
        from core.models import ReadModelState

        now = time.monotonic()
        if not force and now - self._written_at < PROGRESS_SECONDS:
            return
        self._written_at = now
        ReadModelState.objects.filter(pk=1).update(stage=stage.name[:64], done=stage.count, total=stage.total)


# --- Health ---------------------------------------------------------------------------------


def health() -> dict[str, Any] | None:
    """None when the read model is ready; else what /healthz shows of the rebuild.
    Raises RedisError when Redis does not answer."""
    from core.models import ReadModelState

    if check(fresh=True):
        return None
    row = ReadModelState.objects.filter(pk=1).first()
    if row is None or not row.rebuilding:
        return {"stage": "starting", "done": 0, "total": 0, "started_at": None, "elapsed_seconds": 0.0}
    elapsed = (timezone.now() - row.started_at).total_seconds() if row.started_at else 0.0
    return {
        "stage": row.stage or "starting",
        "done": row.done,
        "total": row.total,
        "started_at": row.started_at.isoformat() if row.started_at else None,
        "elapsed_seconds": round(elapsed, 1),
    }
