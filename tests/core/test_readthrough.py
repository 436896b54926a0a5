"""Read-through entries: misses cached, one fill per key under concurrency
(threads of one process, and processes through the Redis fill lock), logical
expiry with jitter, invalidation, and PostgreSQL answering when Redis is down."""

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis as redis_lib
from django.contrib.auth.models import User
from django.db import connection
from django.test import override_settings
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.backoff import NoBackoff
from redis.retry import Retry
from rest_framework.test import APIClient

import core.lua
from accounts import keys as account_keys
from accounts.authentication import TokenAuthentication, cached_user
from accounts.models import ApiToken
from accounts.selectors import user_platforms
from accounts.tokens import PREFIX, password_mark, token_digest, token_lifetime
from core import keys, readmodel, readthrough
from core.readthrough import Policy, parse
from notices import keys as notice_keys
from tests.conftest import assert_error, client_for
from tests.factories import UserFactory
from tests.fixtures.clients import token_for

pytestmark = pytest.mark.django_db(transaction=True)

BAD_TOKEN = "0" * 40


class QueryCounter:
    """Counts the SQL statements of every thread that installs it (each thread
    has its own connection); ``pause`` slows each one, so that concurrent
    requests all arrive while the first fill is still reading."""

    def __init__(self, pause: float = 0.0) -> None:
        self.count = 0
        self.statements: list[str] = []
        self.pause = pause
        self._lock = threading.Lock()

    def __call__(self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        with self._lock:
            self.count += 1
            self.statements.append(sql)
        time.sleep(self.pause)
        return execute(sql, params, many, context)

    @contextmanager
    def installed(self) -> Iterator[None]:
        with connection.execute_wrapper(self):
            yield


def run_together(threads: int, work: Callable[[], Any]) -> list[Any]:
    """Run ``work`` in ``threads`` threads released at the same moment; returns
    their results (an exception is re-raised)."""
    barrier = threading.Barrier(threads)
    results: list[Any] = [None] * threads
    errors: list[BaseException] = []

    def one(index: int) -> None:
        try:
            barrier.wait()
            results[index] = work()
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    pool = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    if errors:
        raise errors[0]
    return results


def entry_of(token: str) -> str:
    """The Redis key of the token's authentication entry (named by its digest)."""
    return account_keys.auth_token(token_digest(token))


def token_owner(key: str) -> Any:
    """What the API's token authentication finds for ``key`` (None: refused)."""
    policy = readthrough.auth_policy()
    return readthrough.read_through(entry_of(key), lambda: _owner(key), policy=policy)


def _owner(key: str) -> Any:
    owner = ApiToken.objects.filter(digest=token_digest(key)).values_list("user_id", flat=True).first()
    return {"id": owner} if owner is not None else None


# --- one fill per key ------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("in_process", [True, False], ids=["threads-of-one-process", "redis-lock-only"])
@pytest.mark.parametrize("known", [True, False], ids=["valid-token", "bad-token"])
def test_concurrent_misses_of_one_key_cost_one_query(in_process: bool, known: bool, monkeypatch: Any) -> None:
    user = UserFactory()
    key = token_for(user) if known else BAD_TOKEN
    if not in_process:
        # Every thread on its own, as separate processes would be: only the Redis lock joins them.
        monkeypatch.setattr(readthrough, "_single_flight", lambda _key, work: work())
    counter = QueryCounter(pause=0.05)

    def request() -> Any:
        with counter.installed():
            return token_owner(key)

    results = run_together(24, request)
    assert counter.count == 1
    assert results == [{"id": user.pk} if known else None] * 24


@pytest.mark.django_db(transaction=True)
def test_concurrent_token_requests_through_authentication_cost_one_query() -> None:
    user = UserFactory()
    key = token_for(user)
    counter = QueryCounter(pause=0.05)
    auth = TokenAuthentication()

    def request() -> Any:
        with counter.installed():
            return auth.authenticate_credentials(key)[0].pk

    assert run_together(24, request) == [user.pk] * 24
    # One fill for all of them: one read (the token, its user and their
    # platforms) and, the token being new, its one "last used" write.
    assert counter.count == 2, counter.statements
    read, write = counter.statements
    assert read.startswith("SELECT"), read
    assert write.startswith("UPDATE"), write
    assert all(name in write for name in ("core_apitoken", "last_used_at")), write


@override_settings(MESSAGECENTER_CACHE_FILL_LEASE_MS=150)
def test_a_filler_that_died_releases_by_lease_expiry(redis: Any) -> None:
    user = UserFactory()
    key = token_for(user)
    # A filler took the lock and died before it stored anything.
    assert readmodel.cache_fill_lock(key=entry_of(key), token="dead", lease_ms=150)
    started = time.monotonic()
    assert token_owner(key) == {"id": user.pk}
    assert time.monotonic() - started >= 0.1  # it waited for the lease...
    assert parse(redis.get(entry_of(key))).value == {"id": user.pk}  # ...then filled it itself


# --- misses ------------------------------------------------------------------------------


def test_a_repeated_bad_token_costs_no_sql(django_assert_num_queries: Any) -> None:
    client = client_for(UserFactory())
    client.credentials(HTTP_AUTHORIZATION=f"Token {BAD_TOKEN}")
    with django_assert_num_queries(1):
        assert_error(client.get("/api/v1/me/"), 401, "authentication_failed")
    with django_assert_num_queries(0):
        assert_error(client.get("/api/v1/me/"), 401, "authentication_failed")


def test_an_unknown_user_id_is_remembered(django_assert_num_queries: Any) -> None:
    with django_assert_num_queries(1):
        assert cached_user(987654) is None
    with django_assert_num_queries(0):
        assert cached_user(987654) is None


def test_a_token_created_after_a_miss_works_at_once(redis: Any) -> None:
    user = UserFactory()
    key = PREFIX + "f" * 43
    client = client_for(user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert_error(client.get("/api/v1/me/"), 401, "authentication_failed")
    assert parse(redis.get(entry_of(key))).found  # the miss is cached
    owner, now = UserFactory(), timezone.now()
    ApiToken.objects.create(  # the row token_issue makes, for this very token
        user=owner,
        digest=token_digest(key),
        password_mark=password_mark(owner.password),
        created_at=now,
        expires_at=now + token_lifetime(),
    )
    assert client.get("/api/v1/me/").status_code == 200


def test_a_user_created_after_a_miss_is_found(django_assert_num_queries: Any) -> None:
    # The next id, not a far one: SQLite keeps a table's highest id across the
    # rollback, so a far id would move every later test's users there (into
    # another announcement chunk, for one).
    late_id = (User.objects.order_by("-pk").values_list("pk", flat=True).first() or 0) + 1
    assert cached_user(late_id) is None
    UserFactory(id=late_id, username="late")
    user = cached_user(late_id)
    assert user is not None
    assert user.username == "late"


def test_a_miss_lives_only_the_null_ttl(redis: Any) -> None:
    cached_user(555555)
    ttl_ms = redis.pttl(account_keys.auth_user(555555))
    nominal = readthrough.auth_policy().miss * 1000
    assert 0 < ttl_ms <= nominal * 1.11


# --- logical expiry -------------------------------------------------------------------------


def _stale_entry(redis: Any, key: str, value: Any) -> None:
    """An entry whose fresh time passed a second ago (Redis still keeps it)."""
    body, _ttl = readthrough.encode(value, readthrough.auth_policy(), readthrough._now_ms() - 10**7)
    redis.set(key, body, px=60_000)
    assert not readthrough.parse(redis.get(key)).fresh_until_ms > readthrough._now_ms()


def test_a_stale_entry_is_served_while_another_request_refreshes(redis: Any, django_assert_num_queries: Any) -> None:
    user = UserFactory()
    key = token_for(user)
    _stale_entry(redis, entry_of(key), {"id": "old"})
    assert readmodel.cache_fill_lock(key=entry_of(key), token="other", lease_ms=5000)  # someone refreshes
    with django_assert_num_queries(0):
        assert token_owner(key) == {"id": "old"}


def test_the_request_that_finds_an_entry_stale_refreshes_it(redis: Any, django_assert_num_queries: Any) -> None:
    user = UserFactory()
    key = token_for(user)
    _stale_entry(redis, entry_of(key), {"id": "old"})
    with django_assert_num_queries(1):
        assert token_owner(key) == {"id": user.pk}
    entry = parse(redis.get(entry_of(key)))
    assert entry.value == {"id": user.pk}
    assert entry.fresh_until_ms > readthrough._now_ms()
    assert not redis.exists(keys.fill_lock(entry_of(key)))  # released


def test_a_request_that_locks_after_another_refreshed_serves_the_fresh_value(
    redis: Any, monkeypatch: pytest.MonkeyPatch, django_assert_num_queries: Any
) -> None:
    """A request read the entry stale; before it takes the fill lock, another
    request refreshes the entry and releases the lock. The entry is looked at
    again with the lock, so this one serves the fresh value without a query."""
    user = UserFactory()
    key = token_for(user)
    _stale_entry(redis, entry_of(key), {"id": "old"})
    real = readmodel.cache_fill_lock_and_look

    def after_another_refresh(**kwargs: Any) -> Any:
        body, _ttl = readthrough.encode({"id": user.pk}, readthrough.auth_policy(), readthrough._now_ms())
        redis.set(entry_of(key), body, px=60_000)
        return real(**kwargs)

    monkeypatch.setattr(readmodel, "cache_fill_lock_and_look", after_another_refresh)
    with django_assert_num_queries(0):
        assert token_owner(key) == {"id": user.pk}
    assert not redis.exists(keys.fill_lock(entry_of(key)))  # released


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_on_a_stale_entry_refresh_it_once() -> None:
    user = UserFactory()
    key = token_for(user)
    client = readmodel.get_redis()
    _stale_entry(client, entry_of(key), {"id": "old"})
    counter = QueryCounter(pause=0.05)

    def request() -> Any:
        with counter.installed():
            return token_owner(key)

    results = run_together(16, request)
    assert counter.count == 1
    assert set(map(str, (r["id"] for r in results))) <= {"old", str(user.pk)}
    assert {"id": user.pk} in results  # the refresher's own answer
    assert parse(client.get(entry_of(key))).value == {"id": user.pk}


@settings(max_examples=60, deadline=None)
@given(fresh=st.floats(1, 10_000), stale=st.floats(0, 1_000), miss=st.floats(1, 600), now=st.integers(0, 2**41))
def test_lifetimes_are_spread_within_the_jitter(fresh: float, stale: float, miss: float, now: int) -> None:
    policy = Policy(fresh=fresh, stale=stale, miss=miss)
    jitter = 0.1
    with override_settings(MESSAGECENTER_CACHE_JITTER=jitter):
        body, ttl_ms = readthrough.encode({"a": 1}, policy, now)
        entry = parse(body)
        fresh_ms = entry.fresh_until_ms - now
        assert fresh * (1 - jitter) * 1000 - 1 <= fresh_ms <= fresh * (1 + jitter) * 1000
        assert ttl_ms == fresh_ms + int(stale * 1000)  # Redis keeps it through the stale window
        body, ttl_ms = readthrough.encode(None, policy, now)
        entry = parse(body)
        assert entry.found
        assert entry.value is None
        assert entry.fresh_until_ms - now == ttl_ms
        assert miss * (1 - jitter) * 1000 - 1 <= ttl_ms <= miss * (1 + jitter) * 1000


def test_entries_filled_together_do_not_expire_together() -> None:
    policy = readthrough.auth_policy()
    lifetimes = {readthrough.encode({"a": 1}, policy, 0)[1] for _ in range(50)}
    assert len(lifetimes) > 40


# --- invalidation ---------------------------------------------------------------------------


def test_invalidation_replaces_every_copy_with_a_tombstone(recipient: Any, redis: Any) -> None:
    token = token_for(recipient)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/v1/me/").status_code == 200
    # The platforms' own entry, for a user that no snapshot carries them on.
    assert user_platforms(user=User.objects.get(pk=recipient.pk))
    names = [entry_of(token), account_keys.user_platforms(recipient.pk)]
    assert all(parse(redis.get(name)).found for name in names)
    recipient.first_name = "Alice"
    recipient.save()
    assert not any(parse(redis.get(name)).found for name in names)
    assert all(redis.exists(name) for name in names)  # tombstones, for fills in flight


def test_a_fill_that_read_before_an_invalidation_does_not_store(redis: Any) -> None:
    key = account_keys.auth_user(4242)
    assert readmodel.cache_fill_lock(key=key, token="me", lease_ms=5000)
    readthrough.invalidate(key)  # a change committed after the filler looked and read PostgreSQL
    assert not readmodel.cache_fill_store(key=key, token="me", seen=None, entry=b'{"f":1,"v":1}', ttl_ms=5000)
    assert not parse(redis.get(key)).found
    assert not redis.exists(keys.fill_lock(key))


def test_a_fill_whose_lease_ran_out_does_not_store(redis: Any) -> None:
    key = account_keys.auth_user(4243)
    assert readmodel.cache_fill_lock(key=key, token="me", lease_ms=5000)
    redis.set(keys.fill_lock(key), "someone-else")  # the lease ran out and another took it
    assert not readmodel.cache_fill_store(key=key, token="me", seen=None, entry=b'{"f":1,"v":1}', ttl_ms=5000)
    assert redis.get(key) is None
    assert redis.get(keys.fill_lock(key)) == b"someone-else"


# --- Redis down ----------------------------------------------------------------------------


@pytest.fixture
def redis_down(monkeypatch: pytest.MonkeyPatch) -> Any:
    dead = redis_lib.Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.2, socket_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )
    for module in (core.lua, readmodel):
        monkeypatch.setattr(module, "get_redis", lambda: dead)
    return monkeypatch


def test_with_redis_down_lookups_read_postgresql(recipient: Any, redis_down: Any) -> None:
    client = client_for(recipient)
    response = client.get("/api/v1/me/")
    assert response.status_code == 200
    assert response.json()["platforms"] == ["user"]
    client.credentials(HTTP_AUTHORIZATION=f"Token {BAD_TOKEN}")
    assert_error(client.get("/api/v1/me/"), 401, "authentication_failed")
    assert cached_user(recipient.pk) is not None
    assert cached_user(999_999) is None


# --- several entries at once (a page of rows) ---------------------------------------------


class CountingLoad:
    """A ``read_through_many`` loader over ``rows`` that records each call's keys."""

    def __init__(self, entry_keys: list[str], rows: dict[str, Any]) -> None:
        self.entry_keys, self.rows = entry_keys, rows
        self.calls: list[Any] = []

    def __call__(self, positions: list[int]) -> list[Any]:
        asked = [self.entry_keys[i] for i in positions]
        self.calls.append(asked)
        return [self.rows.get(key) for key in asked]


POLICY = Policy(fresh=60, stale=0, miss=60)


def test_many_entries_load_what_is_missing_in_one_call_then_cost_no_load(redis: Any) -> None:
    entry_keys = [notice_keys.summary(pk) for pk in (1, 2, 3)]
    load = CountingLoad(entry_keys, {entry_keys[0]: {"t": "one"}, entry_keys[2]: {"t": "three"}})
    assert readthrough.read_through_many(entry_keys, load, policy=POLICY) == [{"t": "one"}, None, {"t": "three"}]
    assert load.calls == [entry_keys]  # one load for all three
    assert not any(redis.exists(keys.fill_lock(key)) for key in entry_keys)  # every lock released
    # All cached now, the missing row as a miss: no load at all.
    assert readthrough.read_through_many(entry_keys, load, policy=POLICY) == [{"t": "one"}, None, {"t": "three"}]
    assert len(load.calls) == 1


def test_many_entries_reload_only_the_invalidated_and_the_expired(redis: Any) -> None:
    entry_keys = [notice_keys.summary(pk) for pk in (1, 2, 3)]
    rows = {key: {"t": f"v{i}"} for i, key in enumerate(entry_keys)}
    load = CountingLoad(entry_keys, rows)
    readthrough.read_through_many(entry_keys, load, policy=POLICY)
    rows[entry_keys[0]] = {"t": "edited"}
    readthrough.invalidate(entry_keys[0])
    redis.set(entry_keys[2], readthrough.encode({"t": "old"}, Policy(fresh=0.001, stale=60, miss=1), 0)[0])
    assert readthrough.read_through_many(entry_keys, load, policy=POLICY) == [{"t": "edited"}, {"t": "v1"}, {"t": "v2"}]
    assert load.calls[1:] == [[entry_keys[0], entry_keys[2]]]


def test_many_entries_a_fill_that_read_before_an_invalidation_does_not_store(redis: Any) -> None:
    entry_keys = [notice_keys.summary(pk) for pk in (1, 2)]

    def load(positions: list[int]) -> list[Any]:
        # Read from PostgreSQL, then the row changes and its commit invalidates, then we store.
        readthrough.invalidate(entry_keys[0])
        return [{"t": "before the edit"} for _ in positions]

    assert readthrough.read_through_many(entry_keys, load, policy=POLICY) == [{"t": "before the edit"}] * 2
    assert not parse(redis.get(entry_keys[0])).found  # the edit's tombstone stayed
    assert parse(redis.get(entry_keys[1])).value == {"t": "before the edit"}


def test_many_entries_with_redis_down_load_everything(redis_down: Any) -> None:
    entry_keys = [notice_keys.summary(pk) for pk in (1, 2)]
    load = CountingLoad(entry_keys, {entry_keys[1]: {"t": "two"}})
    assert readthrough.read_through_many(entry_keys, load, policy=POLICY) == [None, {"t": "two"}]
    assert load.calls == [entry_keys]
