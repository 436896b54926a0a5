"""The read model heals itself: a lost or stale Redis is noticed and rebuilt, while serving.

Redis is a read model of PostgreSQL. When it loses its data (a crash without
persistence, FLUSHALL, a failover to an empty replica) or comes back with an
older copy (a restart from its last dump, a failover to a replica that
lagged), nothing fails: Redis simply answers "nothing here", or answers
what was true a moment ago. So a full rebuild ends by writing a generation
number to Redis (``durability.keys.readmodel_generation``) after recording it in
PostgreSQL (``ReadModelState``), with the identity of the server it wrote it
on (``server_identity``: the run id of the Redis process, every primary's on
a cluster). A copy carries the marker of the server it was copied from, so
it shows as what it is: a restarted or promoted server has another run id.

- **Detection.** ``ready()`` reads the marker at most every
  ``MESSAGECENTER_HEALING_CHECK_SECONDS`` per process (a GET and an INFO; the
  answer is held in between, so a request pays nothing). The marker missing,
  written on another server, or a number other than PostgreSQL's, means the
  read model is lost or stale. PostgreSQL is asked only when the marker shows
  a number this process has not seen (after a rebuild, or on a stale replica).
  After any Redis connection failure the next call looks afresh: a Redis that
  was down may be back empty, or back with an older copy.
- **Serving meanwhile.** Callers treat "not ready" like Redis being down
  (``require_ready`` raises ``ReadModelNotReady``, a RedisError): reads answer
  from PostgreSQL, marks are committed and leave an outbox entry. A 404 computed from Redis is
  double-checked with a fresh read of the marker (``confirm_ready``), so the
  moments between a loss and its detection give no false 404.
- **Rebuild.** The process that notices starts a thread (``heal_soon``) that
  runs ``durability.rebuild`` (connected in ``CoreConfig.ready``): it takes a
  PostgreSQL advisory lock (Redis may be what was lost, and the Celery broker
  with it), so one rebuild runs however many processes notice; the others
  keep serving from PostgreSQL. It runs every app's step (its AppConfig's
  ``rebuild_step``, ``core.contributions``), then
  the outbox, and only then writes the new generation. A copy is emptied
  first (every key under the prefix): what it lacks the steps would add, but
  what it holds that PostgreSQL no longer says (a mark undone, a bulletin
  deleted, a token revoked since the copy) adding cannot take away. The embedded
  (SQLite, one process) setup uses a lock in the process instead.
- **Per user.** The steps restore only what users share (bulletins, item
  details, indexes). Each user's own part of the read model is a cache,
  filled from PostgreSQL on the user's first read for the current generation
  (``user_generation``; ``UserNotFilled`` says it is missing): after a loss
  Redis grows back with the users who come back, not with everyone.

``/healthz`` says ``"redis": "rebuilding"`` and since when (``health``).
"""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone
from redis.cluster import RedisCluster
from redis.exceptions import RedisError, ResponseError

from core import breaker, readmodel
from core.redis import get_redis, is_cluster
from durability.keys import readmodel_generation
from durability.models import ReadModelState

logger = logging.getLogger(__name__)


class ReadModelNotReady(RedisError):
    """Redis answers but the read model is lost or being rebuilt: use PostgreSQL."""


class UserNotFilled(ReadModelNotReady):
    """Redis holds what users share but not this user's part of the read model (a
    loss, or an older copy): fill it from PostgreSQL, or answer from PostgreSQL."""

    def __init__(self, user_id: int) -> None:
        super().__init__(f"the read model of user {user_id} is not filled")
        self.user_id = user_id


def enabled() -> bool:
    return bool(getattr(settings, "MESSAGECENTER_SELF_HEALING", True))


# --- Detection (process-local, cheap) ---------------------------------------------------

_state: dict[str, Any] = {"checked_at": -1e18, "ready": True, "generation": None, "failures": 0}
_state_lock = threading.Lock()


def check_interval() -> float:
    """How long a process may go on with its last answer of ``check``: the longest
    a process takes to learn that the read model is lost or back."""
    return float(getattr(settings, "MESSAGECENTER_HEALING_CHECK_SECONDS", 1.0))


def stored_generation() -> int:
    """The generation PostgreSQL says Redis should hold (0: never rebuilt)."""
    row = ReadModelState.objects.filter(pk=1).values_list("generation", flat=True).first()
    return int(row or 0)


def server_identity() -> str:
    """Which Redis process holds the read model: its run id, or every primary's on a
    cluster. A restart or a failover changes it; "" where INFO is refused (the
    embedded fakeredis, which a restart always empties, and managed services that
    hide INFO, where a copy then goes unnoticed). Raises RedisError when Redis does
    not answer."""
    client = get_redis()
    try:
        if is_cluster():
            found = client.info("server", target_nodes=RedisCluster.PRIMARIES)
            return ",".join(sorted(str(info["run_id"]) for info in found.values()))
        return str(client.info("server")["run_id"])
    except ResponseError:
        return ""


def marker_value(generation: int) -> str:
    """What a rebuild writes as the marker: its generation and the server it wrote it on."""
    return f"{generation}@{server_identity()}"


def marker_read() -> tuple[str | None, int | None]:
    """The marker as Redis holds it (None: lost), and its generation when the server
    answering now wrote it (None: lost, or a copy). Raises RedisError when Redis does not answer."""
    raw = get_redis().get(readmodel_generation())
    if raw is None:
        return None, None
    value = raw.decode()
    generation, _, identity = value.partition("@")
    now = server_identity()
    if not generation.isdigit() or not identity_kept(identity, now):
        return value, None
    if identity != now:
        # A primary joined the cluster (its slots came with their keys): the
        # marker names it too from now on, so its own failover is noticed
        # (unless a rebuild wrote another marker since this read).
        readmodel.value_swap(key=readmodel_generation(), seen=value, value=f"{generation}@{now}")
    return value, int(generation)


def identity_kept(written: str, now: str) -> bool:
    """Whether the servers a marker was written on still hold the read model: the
    same server, or on a cluster every primary it names still a primary (one
    added since brought its slots' keys with it; one gone, failed over or
    restarted may have held an older copy)."""
    if written == now:
        return True
    if not written or not now:
        return False
    return set(written.split(",")) <= set(now.split(","))


def marker() -> int | None:
    """The generation Redis holds, if the server answering now is the one it was
    written on (None: lost, or a copy). Raises RedisError when Redis does not answer."""
    return marker_read()[1]


def check(*, fresh: bool = False) -> bool:
    """Whether Redis holds the read model PostgreSQL last filled it with (see the module).

    Raises RedisError when Redis does not answer (callers already handle that).
    When it answers "no", a rebuild is started (``heal_soon``).
    """
    if not enabled():
        return True
    now = time.monotonic()
    failed = breaker.traffic.failures
    if not fresh and now - _state["checked_at"] < check_interval() and failed == _state["failures"]:
        return bool(_state["ready"])
    try:
        held = marker()
    except RedisError:
        _state["checked_at"] = -1e18  # look again as soon as it answers: it may come back empty
        raise
    _state["failures"] = failed
    seen = _state["generation"]
    if held is not None and held != seen:
        # A number this process has not seen: another process's rebuild, or a stale replica.
        _state["generation"] = stored_generation()
    ready = held is not None and held == _state["generation"]
    was_ready = _state["ready"]
    _state["checked_at"], _state["ready"] = now, ready
    if not ready:
        if was_ready:
            logger.warning("redis read model lost or stale (marker %s, expected %s)", held, _state["generation"])
        heal_soon()
    elif not was_ready or (seen is not None and held != seen):
        # The read model is back, or was rebuilt by another process between two
        # looks of this one: what this process remembers of Redis (the outbox's
        # "nothing pending", the users it marked active today) is out of date.
        for listener in _hooks.on_ready:
            listener()
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


def user_generation() -> str:
    """The generation a user's part of the read model must be filled for ("" when
    healing is off: every user's part counts as filled). A rebuild restores what
    users share; each user's own part is filled on their first read after it, so
    a user filled for another generation (before a loss, or on a stale replica)
    is filled again."""
    if not enabled():
        return ""
    generation = _state["generation"]
    return "" if generation is None else str(generation)


def invalidate() -> None:
    """Drop the generation marker: every process then treats the read model as lost
    (answers from PostgreSQL) and one rebuilds it. For an app that finds its part of
    Redis in a shape this code cannot read (the announcements' read-state layout)."""
    get_redis().delete(readmodel_generation())
    _state["checked_at"] = -1e18  # this process looks at once


def forget() -> None:
    """Drop the process's memory of the last check and healing attempt (tests)."""
    _state.update(checked_at=-1e18, ready=True, generation=None, failures=0)
    _healer["next"] = 0.0


# --- Healing in the background ---------------------------------------------------------


@dataclass
class _Hooks:
    # Set from CoreConfig.ready(): the rebuild (durability.rebuild) and the outbox
    # build on this module, so it reaches them through these, not imports.
    heal: Callable[[], object] | None = None
    on_ready: list[Callable[[], None]] = field(default_factory=list)


_hooks = _Hooks()


def connect(*, heal: Callable[[], object], on_ready: Callable[[], None]) -> None:
    """Name what a process runs to heal (in its healer thread) and what it calls when
    the read model is back (``CoreConfig.ready``)."""
    _hooks.heal = heal
    if on_ready not in _hooks.on_ready:
        _hooks.on_ready.append(on_ready)


def adopt(generation: int) -> None:
    """A rebuild of this process wrote ``generation``: expect it, and look again at once."""
    _state.update(generation=generation, checked_at=-1e18)


_healer: dict[str, Any] = {"thread": None, "next": 0.0}


def heal_soon() -> None:
    """Start a rebuild in a thread of this process unless one runs here already (it
    only rebuilds if it wins the lock and the read model is still not ready)."""
    now = time.monotonic()
    with _state_lock:
        thread = _healer["thread"]
        if (thread is not None and thread.is_alive()) or now < _healer["next"]:
            return
        _healer["next"] = now + check_interval()
        thread = threading.Thread(target=_heal, name="readmodel-healer", daemon=True)
        _healer["thread"] = thread
        thread.start()


def _heal() -> None:
    try:
        if _hooks.heal is not None:
            _hooks.heal()
    except Exception:
        logger.exception("read model rebuild failed; the next check starts another")
    finally:
        connection.close()  # this thread's own connection (and any session lock on it)


def healer_thread() -> threading.Thread | None:
    """The rebuild thread this process started last (tests wait for it)."""
    return _healer["thread"]


# --- Health ---------------------------------------------------------------------------------


def health() -> dict[str, Any] | None:
    """None when the read model is ready; else what /healthz shows of the rebuild
    (when it started, if it has). Raises RedisError when Redis does not answer."""
    if check(fresh=True):
        return None
    row = ReadModelState.objects.filter(pk=1).first()
    if row is None or not row.rebuilding or row.started_at is None:
        return {"started_at": None, "elapsed_seconds": 0.0}
    return {
        "started_at": row.started_at.isoformat(),
        "elapsed_seconds": round((timezone.now() - row.started_at).total_seconds(), 1),
    }
