"""Read-through cache hygiene: SQL queries spent when many requests miss the
same entry at once (a token's owner), against one fill per miss (at least a
query each: what every request did before entries had a fill lock), and by a
repeated bad token."""

import threading
import time
from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection

from accounts import keys as account_keys
from accounts.authentication import TokenAuthentication
from accounts.models import ApiToken
from accounts.tokens import token_digest, token_issue
from bench.harness import Row
from core import keys, readmodel, readthrough

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
    entry = account_keys.auth_token(token_digest(key))
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


def run(*, users: int, quick: bool) -> list[Row]:
    user, _ = get_user_model().objects.get_or_create(username="bench-cache")
    ApiToken.objects.filter(user=user).delete()
    key = token_issue(user=user).token
    readthrough.read_through(  # platforms cached, as after any earlier request of the user
        account_keys.user_platforms(user.pk), lambda: ["user"], policy=readthrough.platforms_policy()
    )
    # A token in use: its first fill writes its "last used" time, which the
    # fills measured below (within the cache's lifetime of it) leave alone, so
    # each of them is the one read.
    TokenAuthentication().authenticate_credentials(key)
    rows: list[Row] = []
    for label, token in (("valid token", key), ("bad token", BAD_TOKEN)):
        rows.append(
            Row(
                CASE,
                f"{CONCURRENT} concurrent misses of one {label}: SQL queries (threads of one process)",
                _misses(token, threads=CONCURRENT),
                "queries",
                "a fill per miss",
                CONCURRENT,
                at_most=1,
            )
        )
    readmodel.get_redis().delete(account_keys.auth_token(token_digest(BAD_TOKEN)))
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
