"""Pending deliveries: delivery work committed with its data, relayed to Celery until done.

A message or notification is published in one transaction that also writes
a ``PendingDelivery`` row for its delivery (``delivery_add``); the delivery
writes one row per fan-out chunk the same way. After commit the row is handed
to Celery (or, without a broker, run here). A row is deleted only when its
work has reached Redis, so:

- a broker that refuses the hand-over costs the request nothing (it answers
  as usual) and the row waits for the relay;
- a task that meets a Redis error records it on the row and returns: the row
  is due again after a short backoff (at most
  ``MESSAGECENTER_DELIVERY_RETRY_MAX_SECONDS``), however long the outage;
- a task the broker lost (a Redis broker that restarted empty) is handed
  over again once its lease (``MESSAGECENTER_DELIVERY_LEASE_SECONDS``) ran
  out; a task whose worker died while running it, once the shorter run lease
  (``MESSAGECENTER_DELIVERY_RUN_LEASE_SECONDS``, set when a worker starts it)
  ran out; a task a worker took and died before starting (or that a Redis
  broker lost between its pop and its bookkeeping) is handed over again once
  a later row of the same task started (the queue is first in, first out:
  ``_RUNNING_SQL``) and the run lease ran out, unless the broker hands it out
  first by itself (RabbitMQ when the worker's connection drops, Redis after
  its visibility timeout), and at the latest with the row's lease.

The relay (``delivery_relay``) runs from Celery beat every
``MESSAGECENTER_DELIVERY_RELAY_SECONDS``, after each hand-over for a few due
rows, and inline from ``check_redis --repair`` (the ``deliveries`` drift
area). Running a row twice changes nothing: ``deliver.lua`` adds with ZADD
NX (a member already there arrives no second time), and a chunk's
``FanoutChunk`` row is written once.

The app registers what runs each task's row (``register``, from
``AppConfig.ready``): the services send their work here by task name and this
module never imports them.
"""

import functools
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery import Task, current_app
from django.conf import settings
from django.db import OperationalError as DatabaseOperationalError
from django.db import connections, router, transaction
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError
from redis.exceptions import RedisError

from core.breaker import CircuitBreaker
from core.redis import get_redis
from insight.metrics import State
from messagecenter.models import PendingDelivery, PushDelivery
from webhooks import services as webhooks

logger = logging.getLogger(__name__)

# Due rows a hand-over relays besides its own: what a beat-less set-up (no
# broker, or beat stopped) needs to catch up, without making one request pay
# for a long backlog.
PIGGYBACK = 20

Job = Callable[[int, int], int]  # (object id, chunk index) -> how many users it reached


@dataclass(frozen=True)
class _Registered:
    job: Job
    chunked: bool  # the task takes (object id, index); otherwise (object id)


_jobs: dict[str, _Registered] = {}
# Set while this thread relays inline: the rows that work adds (a delivery's
# chunks) are left to the same loop instead of being handed to Celery, and no
# nested relay starts.
_state = threading.local()
# Whether this process has seen a delivery fail since its piggyback last found
# nothing pending (see _piggyback).
_local: dict[str, bool] = {"failed": False}
# A broker that refused a publish is not asked again for a few seconds: every
# publish meanwhile would pay a connection attempt (a timeout, when its host
# does not answer) for a row that waits for the relay anyway.
_broker_breaker = CircuitBreaker(cooldown=2.0)


def register(task: str, job: Job, *, chunked: bool) -> None:
    """Name the function that runs rows of ``task`` (``job(object_id, index)``)."""
    _jobs[task] = _Registered(job, chunked)


def _celery_task(task: str) -> Task:
    return current_app.tasks[task]


def _eager() -> bool:
    return bool(current_app.conf.task_always_eager)


def _relaying() -> bool:
    return bool(getattr(_state, "relaying", False))


def _key(task: str, object_id: int, index: int) -> dict[str, Any]:
    return {"task": task, "object_id": object_id, "index": index}


def _after(seconds: float, now: datetime | None = None) -> datetime:
    return (now or timezone.now()) + timedelta(seconds=seconds)


def _backoff(attempts: int) -> float:
    """Seconds before the next try: doubling from half a second, capped at a few
    seconds, so a delivery resumes soon after Redis does."""
    return float(min(0.5 * 2 ** max(attempts - 1, 0), float(settings.MESSAGECENTER_DELIVERY_RETRY_MAX_SECONDS)))


# --- Writing -----------------------------------------------------------------


def delivery_add(
    *, task: str, object_id: int, indexes: Iterable[int] = (0,), first: Callable[[], int] | None = None
) -> None:
    """Record work of ``task`` in the current transaction; hand it over after commit.

    ``first``: when tasks run in this process (no broker), what to run for a
    single row instead of the task, which would reload what the caller holds;
    on a Redis error the task gets one more go, then the row waits.
    A rolled-back transaction drops rows and hand-over together.
    """
    if task not in _jobs:
        raise ValueError(f"No delivery job registered for task {task!r}.")
    wanted = list(indexes)
    if not wanted:
        return
    # Due once a hand-over had time to run: the beat relay does not send a row
    # its hand-over is sending, and finds it if this process dies first. Due at
    # once under an inline relay, which runs the rows itself (no hand-over).
    due = timezone.now() if _relaying() else _after(float(settings.MESSAGECENTER_DELIVERY_LEASE_SECONDS))
    _insert(task, object_id, wanted, due)
    transaction.on_commit(lambda: _hand_over(task, object_id, wanted, first))


# Rows per INSERT: five parameters each, well under SQLite's limit on them.
INSERT_BATCH = 100
_INSERT_SQL = "INSERT INTO {table} ({columns}) VALUES {values} ON CONFLICT DO NOTHING"
# The model's fields, each stored under its own name (no db_column), and one row's values.
_INSERT_COLUMNS = ("task", "object_id", "index", "due_at", "created_at", "attempts", "last_error")
_INSERT_ROW = "(%s, %s, %s, %s, %s, 0, '')"


def _insert(task: str, object_id: int, indexes: Sequence[int], due: datetime) -> None:
    """The rows, by plain INSERTs that skip those already there (a rerun's).
    Every publish writes one: the ORM's bulk_create (instances, per-field
    preparation, its conflict handling) cost as much again as the
    statement's round trip. Values are adapted as the ORM adapts them
    (SQLite keeps datetimes as text)."""
    connection = connections[router.db_for_write(PendingDelivery)]
    ops = connection.ops
    table, columns = ops.quote_name(PendingDelivery._meta.db_table), ", ".join(map(ops.quote_name, _INSERT_COLUMNS))
    due_value, now_value = ops.adapt_datetimefield_value(due), ops.adapt_datetimefield_value(timezone.now())
    with connection.cursor() as cursor:
        for start in range(0, len(indexes), INSERT_BATCH):
            batch = indexes[start : start + INSERT_BATCH]
            values = ", ".join([_INSERT_ROW] * len(batch))
            cursor.execute(
                _INSERT_SQL.format(table=table, columns=columns, values=values),
                [value for index in batch for value in (task, object_id, index, due_value, now_value)],
            )


def _hand_over(task: str, object_id: int, indexes: Sequence[int], first: Callable[[], int] | None) -> None:
    if _relaying():
        return  # the inline relay picks the rows up itself
    if first is not None and _eager() and len(indexes) == 1:
        done, _ = _attempt(task, object_id, indexes[0], first)
        if done:
            _piggyback()
            return
    if _send(task, [(object_id, index) for index in indexes]):
        _piggyback()


def _send(task: str, rows: Sequence[tuple[int, int]]) -> bool:
    """Hand rows to Celery; on a broker error postpone those not sent and say False.

    ``retry=False``: a broker that does not answer fails the publish at once
    instead of holding the request through kombu's retries; the row is the retry.
    """
    registered = _jobs[task]
    celery_task = _celery_task(task)
    delay = float(settings.MESSAGECENTER_DELIVERY_RETRY_MAX_SECONDS)
    for sent, (object_id, index) in enumerate(rows):
        args = [object_id, index] if registered.chunked else [object_id]
        try:
            if _broker_breaker.is_open and not _eager():
                raise BrokerError("the broker failed moments ago; not tried again yet")
            celery_task.apply_async(args=args, retry=False)
        except Exception as exc:
            # Not only kombu's OperationalError: kombu converts only the
            # errors it deems recoverable, and a publish can also fail with a
            # raw AMQP error (a nacked publisher confirm, a channel closed by
            # the broker). Whatever the cause, the rows are committed and
            # the relay is the retry; letting it escape would fail a planner
            # whose rows then wait for the whole lease. Eager Celery ran the
            # task right here: its own failure was recorded by _attempt.
            if _eager() and not isinstance(exc, (BrokerError, OSError)):
                raise
            logger.warning("broker refused %s%r, kept pending: %r", task, args, exc)
            _broker_breaker.record_failure()
            for rest_id, rest_index in rows[sent:]:
                _note_failure(task, rest_id, rest_index, exc, delay=delay)
            return False
    _broker_breaker.record_success()
    return True


def _note_failure(task: str, object_id: int, index: int, exc: Exception, *, delay: float | None = None) -> None:
    """Count a failed try on the row (recreating it for a task sent before rows
    existed) and make it due again after ``delay`` or the backoff."""
    _local["failed"] = True
    message = f"{type(exc).__name__}: {exc}"[:2000]
    row = PendingDelivery.objects.filter(**_key(task, object_id, index)).first()
    attempts = (row.attempts if row is not None else 0) + 1
    due = _after(_backoff(attempts) if delay is None else delay)
    PendingDelivery.objects.update_or_create(
        **_key(task, object_id, index), defaults={"attempts": attempts, "last_error": message, "due_at": due}
    )
    if attempts == int(settings.MESSAGECENTER_DELIVERY_FAILED_EVENT_ATTEMPTS):
        # Once per row, when its failures look like more than a blip.
        webhooks.webhook_emit(
            event="delivery.failed",
            data={"task": task, "object_id": str(object_id), "index": index, "attempts": attempts, "error": message},
        )


# --- Running -----------------------------------------------------------------


def _attempt(task: str, object_id: int, index: int, work: Callable[[], int]) -> tuple[bool, int]:
    """Run one row's work: delete the row when it succeeded (unless the work
    deleted it with its own last write, ``delivery_done_with``), keep it (due
    again soon) when Redis or the database failed it. (succeeded, users reached)."""
    outer = getattr(_state, "finished", None)
    finished: set[tuple[str, int, int]] = set()
    _state.finished = finished
    try:
        reached = work()
    except (RedisError, DatabaseOperationalError) as exc:
        # A service that blinked: Redis, or PostgreSQL (a dropped connection,
        # a deadlock a concurrent run of the same work ran into). Due again
        # with the backoff, as after any outage; if the database cannot even
        # record that, the error goes up and the row keeps the due time it has.
        logger.warning("delivery %s(%s, %s) kept pending: %r", task, object_id, index, exc)
        _note_failure(task, object_id, index, exc)
        return False, 0
    except Exception as exc:
        # A bug or data the job cannot handle: keep the row for an operator,
        # tried again only after a lease, and let the caller see the error.
        _note_failure(task, object_id, index, exc, delay=float(settings.MESSAGECENTER_DELIVERY_LEASE_SECONDS))
        raise
    finally:
        _state.finished = outer
    if (task, object_id, index) not in finished:
        _done(task, object_id, index)
    return True, reached


_DONE_SQL = 'DELETE FROM {table} WHERE task = %s AND object_id = %s AND "index" = %s'
# The same without waiting for the WAL flush of its commit (a flush costs as
# much as the rest of a pull delivery). Losing this DELETE in a PostgreSQL
# crash leaves the row due, and the relay runs its idempotent work once more,
# as after a process that died before deleting it. Only in autocommit:
# set_config(..., true) lasts for the current transaction, which here is this
# statement's alone, but inside a caller's would reach the caller's commit.
_DONE_NO_FLUSH_SQL = _DONE_SQL + " AND set_config('synchronous_commit', 'off', true) IS NOT NULL"


def _done(task: str, object_id: int, index: int) -> None:
    """Delete a row whose work is done: one plain statement (a queryset's
    delete() wraps its DELETE in a transaction of its own: three statements
    on every publish)."""
    connection = connections[router.db_for_write(PendingDelivery)]
    table = connection.ops.quote_name(PendingDelivery._meta.db_table)
    unflushed = connection.vendor == "postgresql" and connection.get_autocommit()
    with connection.cursor() as cursor:
        cursor.execute((_DONE_NO_FLUSH_SQL if unflushed else _DONE_SQL).format(table=table), [task, object_id, index])


def delivery_done_with(
    *, task: str, object_id: int, index: int = 0, statement: str, params: Sequence[Any]
) -> int | None:
    """The work's own last write, ``statement`` (an UPDATE, its parameters
    ``params``), and the deletion of its row as one statement: one round trip
    where there were two, on every publish of a message to everyone. Returns
    the UPDATE's row count. Neither waits for the WAL flush, as ``_done`` and
    the work's status write did not (the same argument holds: lost in a crash,
    the row is due again and the idempotent work runs once more).

    None, having done nothing, where it cannot be one statement: not
    PostgreSQL (SQLite has no DELETE in a WITH), or inside a caller's
    transaction (whose commit decides, with its flush). The caller then
    writes as before, and the row goes after the work as always."""
    connection = connections[router.db_for_write(PendingDelivery)]
    if connection.vendor != "postgresql" or not connection.get_autocommit():
        return None
    table = connection.ops.quote_name(PendingDelivery._meta.db_table)
    with connection.cursor() as cursor:
        # A DELETE in a WITH runs whatever the UPDATE matches.
        cursor.execute(
            "WITH done AS (" + _DONE_SQL.format(table=table) + ") " + statement, [task, object_id, index, *params]
        )
        count = int(cursor.rowcount)
    finished = getattr(_state, "finished", None)
    if finished is not None:  # run by _attempt: the row is gone already
        finished.add((task, object_id, index))
    return count


def delivery_run(*, task: str, object_id: int, index: int = 0) -> int:
    """The body of a delivery task: run the row; a Redis error leaves it pending
    for the relay (no Celery retry: with the broker on that Redis a retry
    could not even be queued). Returns the users reached."""
    job = _jobs[task].job
    if not _eager():
        _running(task, object_id, index)
    _, reached = _attempt(task, object_id, index, lambda: job(object_id, index))
    return reached


# A row that starts cuts its own lease, and the lease of every row of the same
# task handed over before it (an earlier (due_at, id): a batch's rows share
# one due time and are sent in id order) that no worker has started: one
# still on its hand-over lease (later than the run lease ends) and never
# failed. The queue is first in, first out, so such a row was taken before
# this one: by a worker that died holding it, or lost between the broker's
# pop and its bookkeeping (kombu's Redis transport pops a message, then
# records it as unacknowledged; a kill in between loses it). Either way it is
# handed over again after the run lease instead of the whole lease; if it was
# only slow to start, its own start sets the same lease, and a rerun changes
# nothing. One statement.
_RUNNING_SQL = (
    "UPDATE {table} SET due_at = %s"
    ' WHERE task = %s AND ((object_id = %s AND "index" = %s)'
    " OR (attempts = 0 AND due_at > %s"
    ' AND (due_at, id) < (SELECT due_at, id FROM {table} WHERE task = %s AND object_id = %s AND "index" = %s)))'
)


def _running(task: str, object_id: int, index: int) -> None:
    """A worker took the row's task: make the row due again after the run
    lease. The worker may be killed in the middle (its task is then held by
    the broker, unacknowledged, for the visibility timeout); the relay hands
    the row over again once the run lease is out, instead of the whole lease
    that covers a task's wait in the queue. Rows of the task sent before it
    and not started get the same lease (``_RUNNING_SQL``)."""
    due = _after(float(settings.MESSAGECENTER_DELIVERY_RUN_LEASE_SECONDS))
    connection = connections[router.db_for_write(PendingDelivery)]
    table = connection.ops.quote_name(PendingDelivery._meta.db_table)
    due_value = connection.ops.adapt_datetimefield_value(due)
    with connection.cursor() as cursor:
        cursor.execute(
            _RUNNING_SQL.format(table=table),
            [due_value, task, object_id, index, due_value, task, object_id, index],
        )


def _read_model_answers() -> bool:
    try:
        get_redis().ping()
    except RedisError:
        return False
    return True


def delivery_relay(*, limit: int = 500, inline: bool = False, due_only: bool = True) -> int:
    """Hand due rows to Celery, or with ``inline`` run them here (no broker,
    ``check_redis --repair``; ``due_only=False`` takes every pending row,
    including those a worker may be running: running twice changes nothing).

    Handing over waits while the read model's Redis does not answer (every
    task would only fail); it leases the rows first, so two relays do not send
    one row twice. Inline, the loop also runs the rows its work adds (a
    delivery's chunks) and stops at the first Redis error. Returns how many
    rows were handed over or done.
    """
    if _relaying():
        return 0
    if inline:
        _state.relaying = True
        try:
            return _relay_inline(limit=limit, due_only=due_only)
        finally:
            _state.relaying = False
    now = timezone.now()
    with transaction.atomic():
        rows = list(
            PendingDelivery.objects.filter(due_at__lte=now)
            .order_by("due_at", "id")
            .select_for_update(skip_locked=True)[:limit]
        )
        if not rows or not _read_model_answers():
            return 0
        lease = _after(float(settings.MESSAGECENTER_DELIVERY_LEASE_SECONDS), now)
        PendingDelivery.objects.filter(pk__in=[row.pk for row in rows]).update(due_at=lease)
    handed = 0
    for row in rows:
        if not _send(row.task, [(row.object_id, row.index)]):
            # The broker is down: the rest stay leased, and come due with the lease.
            PendingDelivery.objects.filter(pk__in=[r.pk for r in rows[handed + 1 :]]).update(
                due_at=_after(float(settings.MESSAGECENTER_DELIVERY_RETRY_MAX_SECONDS))
            )
            break
        handed += 1
    return handed


def _relay_inline(*, limit: int, due_only: bool) -> int:
    done = 0
    tried: set[int] = set()
    while done < limit:
        queryset = PendingDelivery.objects.exclude(pk__in=tried)
        if due_only:
            queryset = queryset.filter(due_at__lte=timezone.now())
        row = queryset.order_by("id").first()
        if row is None:
            return done
        tried.add(row.pk)
        if row.task not in _jobs:
            continue  # a task this code no longer has: left for an operator
        work = functools.partial(_jobs[row.task].job, row.object_id, row.index)
        succeeded, _ = _attempt(row.task, row.object_id, row.index, work)
        if not succeeded:
            return done  # Redis is down: the rest would fail too
        done += 1
    return done


def _piggyback() -> None:
    """After a hand-over went through, relay a few due rows too (see PIGGYBACK).

    Only without a broker (beat relays otherwise), and only while this process
    has seen a delivery fail: a publish must not pay a query for a backlog that
    is almost never there. Another process's failures are caught up by that
    process's next publish, or by ``check_redis --repair``.
    """
    if not _eager() or not _local["failed"]:
        return
    delivery_relay(limit=PIGGYBACK, inline=True)
    if not PendingDelivery.objects.exists():
        _local["failed"] = False


def forget_local_state() -> None:
    """Drop the process's memory of failures (tests that change the broker or Redis)."""
    _local["failed"] = False
    _broker_breaker.record_success()


# --- Reading ---------------------------------------------------------------------


def delivery_pending() -> list[PendingDelivery]:
    """Every row not done yet, oldest first (the drift check lists them)."""
    return list(PendingDelivery.objects.order_by("id"))


def delivery_due_now(*, ids: Sequence[int]) -> int:
    """Make these rows due at once (an operator who fixed the cause of their
    failures); the relay hands them over on its next pass. Returns how many."""
    return PendingDelivery.objects.filter(pk__in=list(ids)).update(due_at=timezone.now())


def delivery_depth() -> int:
    """How many rows wait (the metrics' pending-delivery depth)."""
    return PendingDelivery.objects.count()


def delivery_oldest_age_seconds() -> float:
    """Seconds since the oldest waiting row was written (0 when none): the fan-out lag."""
    oldest = PendingDelivery.objects.order_by("created_at").values_list("created_at", flat=True)[:1]
    return max((timezone.now() - oldest[0]).total_seconds(), 0.0) if oldest else 0.0


# Read at every scrape of /metrics (the app's AppConfig names them).
GAUGES = (
    State(
        "messagecenter_pending_deliveries",
        "Deliveries and fan-out chunks committed and not yet in Redis.",
        lambda: float(delivery_depth()),
    ),
    State(
        "messagecenter_push_retries_pending",
        "Web pushes that failed and wait for another attempt.",
        lambda: float(PushDelivery.objects.filter(status="pending").count()),
    ),
    State(
        "messagecenter_fanout_lag_seconds",
        "Age of the oldest pending delivery (0 when none): how far fan-out is behind.",
        delivery_oldest_age_seconds,
    ),
)
