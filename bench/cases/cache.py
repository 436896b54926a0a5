"""Read-through cache hygiene: SQL queries spent when many requests miss the
same entry at once (a token's owner), against filling per miss (what every
request did before entries had a fill lock), and by a repeated bad token."""

import threading
import time
from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection

from bench.harness import Row
from core import keys, readmodel, readthrough
from core.authentication import TokenAuthentication
from core.models import ApiToken
from core.tokens import token_digest, token_issue

CASE = "cache"
CONCURRENT = 100
BAD_TOKEN = "b" * 40


class _Counter:
    """SQL statements of every thread that installs it; each is slowed a
    little, as on a loaded database, so the misses overlap the first fill."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def __call__(self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        with self._lock:
            self.count += 1
        time.sleep(0.02)
        return execute(sql, params, many, context)


def _misses(key: str, *, threads: int) -> int:
    """``threads`` token authentications released together on an empty entry: queries spent."""
    entry = keys.auth_token(token_digest(key))
    readmodel.get_redis().delete(entry, keys.fill_lock(entry))
    counter = _Counter()
    barrier = threading.Barrier(threads)
    auth = TokenAuthentication()

    def one() -> None:
        try:
            with connection.execute_wrapper(counter):
                barrier.wait()
                try:
                    auth.authenticate_credentials(key)
                except Exception:  # noqa: S110 (a bad token is refused: the queries are what count)
                    pass
        finally:
            connection.close()

    pool = [threading.Thread(target=one) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return counter.count


def _each_alone(run: Callable[[], int]) -> int:
    """``run`` with both joins switched off: every miss fills on its own."""
    real_flight, real_lock = readthrough._single_flight, readmodel.cache_fill_lock_and_look
    readthrough._single_flight = lambda _key, work: work()  # type: ignore[assignment]
    readmodel.cache_fill_lock_and_look = lambda **kwargs: (True, None)  # type: ignore[assignment]
    try:
        return run()
    finally:
        readthrough._single_flight = real_flight  # type: ignore[assignment]
        readmodel.cache_fill_lock_and_look = real_lock  # type: ignore[assignment]


def _processes_alone(run: Callable[[], int]) -> int:
    """``run`` with the in-process join switched off: the threads meet only at
    the Redis fill lock, as separate processes would."""
    real_flight = readthrough._single_flight
    readthrough._single_flight = lambda _key, work: work()  # type: ignore[assignment]
    try:
        return run()
    finally:
        readthrough._single_flight = real_flight  # type: ignore[assignment]


def run(*, users: int, quick: bool) -> list[Row]:
    user, _ = get_user_model().objects.get_or_create(username="bench-cache")
    ApiToken.objects.filter(user=user).delete()
    key = token_issue(user=user).token
    readthrough.read_through(  # platforms cached, as after any earlier request of the user
        keys.user_platforms(user.pk), lambda: ["user"], policy=readthrough.platforms_policy()
    )
    # A token in use: its first fill writes its "last used" time, which the
    # fills measured below (within the cache's lifetime of it) leave alone, so
    # each of them is the one read.
    TokenAuthentication().authenticate_credentials(key)
    rows: list[Row] = []
    for label, token in (("valid token", key), ("bad token", BAD_TOKEN)):
        baseline = _each_alone(lambda token=token: _misses(token, threads=CONCURRENT))  # type: ignore[misc]
        in_process = _misses(token, threads=CONCURRENT)
        across = _processes_alone(lambda token=token: _misses(token, threads=CONCURRENT))  # type: ignore[misc]
        rows.append(
            Row(
                CASE,
                f"{CONCURRENT} concurrent misses of one {label}: SQL queries (threads of one process)",
                in_process,
                "queries",
                "a fill per miss",
                baseline,
                at_most=1,
            )
        )
        rows.append(
            Row(
                CASE,
                f"{CONCURRENT} concurrent misses of one {label}: SQL queries (joined by the Redis fill lock only)",
                across,
                "queries",
                "a fill per miss",
                baseline,
                at_most=1,
            )
        )
    readmodel.get_redis().delete(keys.auth_token(token_digest(BAD_TOKEN)))
    counter = _Counter()
    auth = TokenAuthentication()
    with connection.execute_wrapper(counter):
        for _ in range(100):
            try:
                auth.authenticate_credentials(BAD_TOKEN)
            except Exception:  # noqa: S110 (refused each time: the queries are what count)
                pass
    rows.append(
        Row(
            CASE,
            "100 requests with one bad token, one after another: SQL queries",
            counter.count,
            "queries",
            "a query per request",
            100,
            at_most=1,
        )
    )
    return rows
