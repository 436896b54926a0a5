"""Projections: read-model writes of committed changes, run once per transaction.

An app names each of its projections with a runner for it (a mapping name ->
``Projection`` its AppConfig names as ``projections``; ``core.contributions``):
``runner(keys, facts)`` writes Redis
for those keys (ids, or small JSON values such as an inbox entry to remove),
reloading from PostgreSQL what it needs, idempotently. Core knows no app:
it only schedules, coalesces and keeps failures.

``project(name, keys, facts=...)`` asks for a run after the current
transaction commits (at once outside one). If Redis fails then, the run goes to the
outbox under the topic the app registered with the projection, and the app's
handler of that topic runs it again once Redis answers (without facts: it
reloads).

Coalescing. A service that writes a row also triggers the model signals, so
the receiver and the service may both ask for the same key in one
transaction. Requests of one transaction are collected in a ``_Batch``; the
first request of a projection to run at commit runs all keys asked for so far
by requests known to have survived, in one runner call (1,000 membership rows
removed become one call for 1,000 users), and later requests find their keys
done. ``facts`` are what the caller knows of a key's whole state (a bulletin
"just created with these groups"): the last request for a key decides, so a
plain request after one with facts (the row changed again) means "reload".

Savepoints. Django forgets the on-commit callbacks of a savepoint that rolls
back; each request registers its own callback, so a rolled-back request never
runs by itself. When one request runs for others, it only trusts those whose
savepoints are a subset of its own (they cannot have been rolled back while
it survived); a key asked for only elsewhere runs with its own callback. The
facts of a key are used only when its last request is trusted that way;
otherwise the runner reloads. A batch belongs to one list of pending
callbacks: Django replaces that list on commit, rollback and savepoint
rollback, so a new list means a new batch (at worst a key then runs twice,
which an idempotent runner allows). A request of the same projection as the
request just before it, under the same savepoints and with no other callback
registered in between, joins it: a cascade deleting 1,000 rows (one signal
each) is one request and one callback.

A process that dies after the commit and before the runs. The runs would be
lost with it, and what users share (bulletins, details, subscriber sets,
announcement indexes, users' memberships) has no user's next read to heal
it. So the first request of a projection that names a drift ``area`` writes
an outbox entry inside the transaction (``durability.unrun``, with the
request's keys), and the batch deletes it once the projection's last
request ran after the commit. A later request with other keys marks it
incomplete, one UPDATE per transaction at most, so a cascade costs no row
per signal. The entry commits with the change or not at all; it is due
only after ``UNRUN_GRACE``, so the replay finds only those whose process
died: it runs their keys again and, for an incomplete one, checks and
mends the projection's whole area. A savepoint that rolls back takes its
requests' writes with it (the next request starts a new batch and entry);
an entry left by a request rolled back that way only runs its keys again,
which changes nothing.

Users' own parts are covered otherwise: a user's write notes itself in the
user's part, and the user's next read fills the part again when the note
outlives its grace. An operator's write to users' parts (a bulletin moved
to show later frees their archived copies, a retraction drops answers) has
no such note, so its caller asks for a record (``recorded=True``). A
projection without an area has no check to mend a partial record, so its
record keeps every key: such callers ask for all their keys at once, and a
later request adds only what the record lacks (one UPDATE each).
"""

import logging
import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model
from django.utils import timezone
from redis.exceptions import RedisError

from core.contributions import contributed_by_name
from durability import drift, healing, outbox

logger = logging.getLogger(__name__)

# The outbox topic of a transaction's requests of one projection (payload: the
# projection's name, the keys of its first request, whether those are all).
UNRUN_TOPIC = "durability.unrun"
# How long after its write a record may wait for its own process to run the
# projection and delete it: longer than any commit and its runs take.
UNRUN_GRACE = timedelta(seconds=30)

Runner = Callable[[list[Any], Mapping[Any, Any]], None]
Payloads = Callable[[list[Any], Mapping[Any, Any]], list[dict[str, Any]]]


@dataclass(frozen=True)
class Projection:
    """``runner(keys, facts)`` writes the read model for ``keys``; when Redis
    fails, ``payloads(keys, facts)`` are recorded under the outbox ``topic``,
    whose handler the app names too (``durability.outbox``).

    ``area`` names the drift check (``durability.drift``) that finds and mends
    what runs of this projection write: a projection with one has its
    requests recorded inside their transaction (see the module docstring).
    None for a projection whose lost run something else covers (a user's
    write, noted in the user's part; a cache whose entries expire)."""

    runner: Runner
    topic: str
    payloads: Payloads
    area: str | None = None


def projections() -> dict[str, Projection]:
    """Every app's projections by name."""
    return contributed_by_name("projections")


def freeze(value: Any) -> Hashable:
    """A key made hashable (lists, as JSON gives them back, become tuples)."""
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def run(name: str, keys: list[Any], facts: Mapping[Any, Any] | None = None) -> None:
    """Run projection ``name`` now; if Redis fails, or the read model is lost or
    being rebuilt, keep it in the outbox.

    While a rebuild runs, its steps may have read PostgreSQL before this change
    committed: written now, the change could be overwritten by the step's older
    state a moment later. Kept in the outbox, it runs after the steps (the
    rebuild drains the outbox before it writes its marker) and reloads."""
    projection = projections()[name]
    given = facts or {}
    try:
        healing.require_ready()
        projection.runner(keys, given)
    except healing.ReadModelNotReady:
        logger.info("read model not ready: projection %s %r waits in the outbox", name, keys[:10])
        _queue(projection, keys, given)
    except RedisError:
        logger.warning("could not project %s %r into redis; queued in the outbox", name, keys[:10])
        _queue(projection, keys, given)


def _queue(projection: Projection, keys: list[Any], given: Mapping[Any, Any]) -> None:
    for payload in projection.payloads(keys, given):
        outbox.enqueue_after_failure(topic=projection.topic, payload=payload)


@dataclass(eq=False)
class _Request:
    batch: "_Batch"
    name: str
    keys: dict[Any, None]  # an ordered set
    facts: dict[Any, Any]
    savepoints: frozenset[str]

    def __call__(self) -> None:
        self.batch.run(self)


@dataclass(eq=False)
class _Unrun:
    """The outbox entry that records a projection's requests of one transaction."""

    pk: int
    keys: set[Any]
    complete: bool = True


@dataclass(eq=False)
class _Batch:
    hooks: list[Any]  # the connection's list of pending on-commit callbacks it belongs to
    requests: list[_Request] = field(default_factory=list)
    last: dict[tuple[str, Any], _Request] = field(default_factory=dict)
    done: set[tuple[str, Any]] = field(default_factory=set)
    last_of: dict[str, _Request] = field(default_factory=dict)  # each projection's last request
    unrun: dict[str, _Unrun] = field(default_factory=dict)

    def add(self, request: _Request) -> bool:
        """Record a request; False when it joined the previous one (no callback of its own needed)."""
        previous = self.requests[-1] if self.requests else None
        if (
            previous is not None
            and previous.name == request.name
            and previous.savepoints == request.savepoints
            and self.hooks
            and self.hooks[-1][1] is previous
        ):
            # The same projection again with nothing registered in between, and
            # the same fate on rollback (a cascade deleting 1,000 rows, one
            # signal each): one request, one callback.
            for key in request.keys:
                previous.keys.setdefault(key)
                if key in request.facts:
                    previous.facts[key] = request.facts[key]
                else:
                    previous.facts.pop(key, None)
                self.last[(request.name, key)] = previous
            return False
        self.requests.append(request)
        self.last_of[request.name] = request
        for key in request.keys:
            self.last[(request.name, key)] = request
        return True

    def record(self, name: str, keys: tuple[Any, ...], *, mended: bool) -> None:
        """Record in this transaction that ``name`` must run for ``keys``: the
        first request writes an entry with its keys. A later one with keys
        the entry lacks marks it incomplete when an area ``mended`` it (once;
        a cascade of a thousand rows costs one write, not a thousand), and
        else adds them."""
        unrun = self.unrun.get(name)
        if unrun is None:
            entry = outbox.enqueue(
                topic=UNRUN_TOPIC,
                payload={"name": name, "keys": list(keys), "complete": True},
                due_at=timezone.now() + UNRUN_GRACE,
            )
            self.unrun[name] = _Unrun(pk=entry.pk, keys=set(keys))
        elif unrun.complete and not unrun.keys.issuperset(keys):
            if mended:
                unrun.complete = False
            else:
                unrun.keys.update(keys)
            payload = {"name": name, "keys": list(unrun.keys), "complete": unrun.complete}
            outbox.payload_replace(unrun.pk, payload)

    def settle(self, request: _Request) -> None:
        """After the last request of its projection ran: its entry goes."""
        unrun = self.unrun.get(request.name)
        if unrun is None or self.last_of.get(request.name) is not request:
            return
        try:
            outbox.discard(unrun.pk)
        except DatabaseError:
            logger.warning("could not delete the record of %s's run; it runs again later", request.name)

    def run(self, request: _Request) -> None:
        self._run(request)
        self.settle(request)

    def _run(self, request: _Request) -> None:
        name = request.name
        if all((name, key) in self.done for key in request.keys):
            return
        keys: list[Any] = []
        for other in self.requests:
            if other.name != name or not other.savepoints <= request.savepoints:
                continue
            for key in other.keys:
                if (name, key) not in self.done:
                    self.done.add((name, key))
                    keys.append(key)
        facts = {}
        for key in keys:
            last = self.last[(name, key)]
            if key in last.facts and last.savepoints <= request.savepoints:
                facts[key] = last.facts[key]
        run(name, keys, facts)


_batches: "weakref.WeakKeyDictionary[BaseDatabaseWrapper, _Batch]" = weakref.WeakKeyDictionary()


def project(
    name: str,
    keys: Iterable[Any],
    *,
    facts: Mapping[Any, Any] | None = None,
    using: str | None = None,
    recorded: bool = False,
) -> None:
    """Run projection ``name`` for ``keys`` after commit, once per transaction
    and key (see the module docstring); ``facts`` by key, when the caller knows
    a key's whole committed state. ``recorded``: record the request in the
    transaction though the projection has no area (an operator's write to
    users' parts, which no note of theirs covers)."""
    if name not in projections():
        # A typo would otherwise show only at commit, or at replay.
        raise ValueError(f"No projection registered as {name!r}.")
    frozen = tuple(dict.fromkeys(freeze(k) for k in keys))
    if not frozen:
        return
    given = {freeze(k): v for k, v in (facts or {}).items()}
    connection = transaction.get_connection(using)
    if not connection.in_atomic_block:
        run(name, list(frozen), given)
        return
    batch = _batches.get(connection)
    if batch is None or batch.hooks is not connection.run_on_commit:
        batch = _Batch(hooks=connection.run_on_commit)
        _batches[connection] = batch
    request = _Request(
        batch=batch,
        name=name,
        keys=dict.fromkeys(frozen),
        facts=given,
        # atomic(savepoint=False) pushes a None: no savepoint, nothing to roll back on its own.
        savepoints=frozenset(s for s in connection.savepoint_ids if s is not None),
    )
    if batch.add(request):
        transaction.on_commit(request, using=using)
    mended = projections()[name].area is not None
    if mended or recorded:
        batch.record(name, frozen, mended=mended)


def replay_unrun(payload: dict[str, Any], user_id: int | None) -> None:
    """Outbox handler of ``durability.unrun``: a transaction committed and its
    process did not run (or could not record running) this projection. The
    recorded keys run again, reloading; when the transaction asked for more
    than its entry holds, the projection's drift area is checked and mended
    as a whole."""
    name = str(payload["name"])
    projection = projections()[name]
    keys = [freeze(key) for key in payload["keys"]]
    if keys:
        projection.runner(keys, {})
    if not payload.get("complete", True) and projection.area is not None:
        result = drift.check_run(repair=True, areas=[projection.area])
        if result.error:
            raise RedisError(result.error)  # the replay keeps the entry and tries again


OUTBOX_HANDLERS = {UNRUN_TOPIC: replay_unrun}


class LoadedValues:
    """Field values of model instances as they were loaded or last saved,
    held by instance identity and weakly (gone with the instance).

    For receivers that skip saves changing nothing they care about, without
    writing attributes onto the instances: ``remember`` in ``post_init`` and
    after a save, ``get`` in ``post_save`` (None: not loaded from a row).
    """

    def __init__(self, fields: tuple[str, ...]) -> None:
        self.fields = fields
        self._values: dict[int, tuple[weakref.ref[Model], tuple[Any, ...]]] = {}

    def of(self, instance: Model) -> tuple[Any, ...]:
        return tuple(instance.__dict__.get(name) for name in self.fields)

    def remember(self, instance: Model, values: tuple[Any, ...] | None = None) -> None:
        """Keep the instance's values now (or ``values``, read elsewhere)."""
        values_now = self.of(instance) if values is None else values
        key = id(instance)
        held = self._values.get(key)
        if held is not None and held[0]() is instance:
            self._values[key] = (held[0], values_now)
            return
        table = self._values

        def forget(_ref: Any, key: int = key) -> None:
            entry = table.get(key)
            if entry is not None and entry[0] is _ref:
                del table[key]

        self._values[key] = (weakref.ref(instance, forget), values_now)

    def get(self, instance: Model) -> tuple[Any, ...] | None:
        held = self._values.get(id(instance))
        if held is None or held[0]() is not instance:
            return None
        return held[1]
