"""The drain loop both read-state snapshot jobs share (announcements, inbox).

Each app keeps a Redis "dirty" set of what its marks changed; its job pops
batches of it and copies them to PostgreSQL. What happens around a batch is
the same everywhere: a batch PostgreSQL could not take goes back into the
dirty set (and the error propagates, so the task retries), and a batch read
while Redis lost its data is handed back untouched (the fresh Redis gets
restored from PostgreSQL on the next run, before anything is copied).

The apps register their jobs (``register``, from ``AppConfig.ready()``) so
that ``manage.py snapshot_read_state`` runs them all without core naming an app.
"""

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeVar

from django.db import DatabaseError

from core.progress import Progress

logger = logging.getLogger(__name__)

Member = TypeVar("Member")


class SnapshotRun(Protocol):
    def __call__(self, *, progress: Progress) -> int: ...


@dataclass(frozen=True)
class SnapshotJob:
    """One app's read-state snapshot: ``run`` copies what changed and returns the rows written."""

    name: str  # what the rows are, as ``snapshot_read_state`` reports them
    run: SnapshotRun


# name -> job, in registration order (INSTALLED_APPS order).
_jobs: dict[str, SnapshotJob] = {}


def register(*, name: str, run: SnapshotRun) -> None:
    _jobs[name] = SnapshotJob(name=name, run=run)


def snapshot_jobs() -> list[SnapshotJob]:
    """Every registered job, in registration order."""
    return list(_jobs.values())


class RedisLost(Exception):
    """The "restored" marker vanished while a batch was read: Redis lost its data."""


class Drained(NamedTuple):
    written: int  # rows ``write`` wrote
    # The dirty set was seen empty: everything dirty when the run started was
    # copied (the marks journal may then forget what is older than the run).
    emptied: bool


def drain_dirty(
    *,
    label: str,
    pending: int,
    pop: Callable[[int], list[Member]],
    give_back: Callable[[list[Member]], None],
    write: Callable[[list[Member]], int],
    batch: int,
    progress: Progress,
) -> Drained:
    """Copy ``pending`` dirty members in batches; returns how many rows ``write``
    wrote and whether the set was seen empty.

    Drains what was dirty when it started: SPOP picks at random, so members
    added meanwhile may be taken first; up to twice as many batches are run
    to take every older one too, and no more, so a steady stream of marks
    cannot keep it running forever (later ones wait for the next run).
    """
    written = 0
    emptied = pending == 0
    with progress.stage(label, pending) as stage:
        for _ in range(2 * math.ceil(pending / batch)):
            members = pop(batch)
            if len(members) < batch:
                emptied = True
            if not members:
                break
            try:
                written += write(members)
            except RedisLost:
                logger.warning("Redis lost its data during a read-state snapshot; restoring on the next run")
                give_back(members)
                return Drained(written, False)
            except DatabaseError:
                give_back(members)
                raise
            stage.advance(len(members))
            if emptied:
                break
    return Drained(written, emptied)
