"""Named personas and clients shared by every test.

- ``operator``: a superuser (holds every model permission);
- ``recipient`` (alice) and ``other_recipient`` (bob): plain users;
- ``outsider`` (mallory): a plain user nothing is addressed to, who must get 404/403.

Every test starts with an empty read model: the Redis database the suite
uses (db 15 in CI, or the embedded fakeredis server) is flushed around it.
Each run, and each xdist worker of a run, takes a test slot of its own
(config/settings/test.py: a Redis db counted down from that one, a PostgreSQL
test database) and a key prefix of its own (``test:s<slot>:``).
With ``MESSAGECENTER_REDIS_CLUSTER_URL`` set (``make test-cluster``, the CI's
third pass) the read model is on a Redis Cluster: only keys under the run's
prefix are deleted, on every master. Tests marked
``not_on_cluster`` are deselected there, visibly, with their reasons;
``celery_worker`` tests where no worker can run (no RabbitMQ, SQLite).
"""

import fcntl
import os
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.core.management import sql as management_sql
from django.core.management.commands import flush as flush_command
from django.test import override_settings
from django_redis import get_redis_connection
from redis import Redis
from redis.cluster import ClusterPipeline, RedisCluster
from redis.exceptions import RedisClusterException, RedisError
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient
from whitenoise.middleware import WhiteNoiseMiddleware

from bench.harness import RoundTrips
from core.breaker import reset_breakers
from core.redis import get_redis
from tests.factories import SuperuserFactory, UserFactory


def on_cluster() -> bool:
    """Is this run's read model on a Redis Cluster (the CI's third pass)?"""
    return bool(os.environ.get("MESSAGECENTER_REDIS_CLUSTER_URL"))


def _flush_cluster_prefix(client: RedisCluster, prefix: str) -> None:
    """Delete this run's keys on every master of a shared cluster.

    FLUSHDB would also wipe the keys of another run using the same cluster
    (a developer beside CI). Keys go one by one: a node refuses a multi-key
    DEL across slots even when it holds them all.
    """
    for node in client.get_primaries():
        node_client = client.get_redis_connection(node)
        pipe = node_client.pipeline(transaction=False)
        for key in node_client.scan_iter(match=f"{prefix}*", count=1000):
            pipe.delete(key)
        pipe.execute()


def flush_redis() -> None:
    """Empty the read model and the cache (on a cluster: only this run's keys)."""
    reset_breakers()
    client = get_redis()
    if isinstance(client, RedisCluster):
        _flush_cluster_prefix(client, str(settings.MESSAGECENTER_KEY_PREFIX))
    else:
        client.flushdb()
    connection = get_redis_connection("default")
    if connection is not client:
        connection.flushdb()


@pytest.fixture(scope="session", autouse=True)
def _run_prefix() -> Iterator[None]:
    """Every run (each xdist worker) gets a key prefix of its own (its test
    slot's). Each has a plain-Redis db of its own, but runs share the cluster's
    one database, and pub/sub channels, named with the prefix, are server-wide:
    with one prefix, a worker's live events would reach the other's listeners
    of the same user id (each worker's test database counts ids from 1)."""
    slot = getattr(settings, "TEST_SLOT", 0)  # config.settings.test
    with override_settings(MESSAGECENTER_KEY_PREFIX=f"{settings.MESSAGECENTER_KEY_PREFIX}s{slot}:"):
        yield


CROSS_SLOT = re.compile(r"CROSSSLOT|same key slot|non local key|cross.?slot", re.IGNORECASE)


@pytest.fixture(autouse=True)
def _cluster_slot_guard() -> Iterator[None]:
    """On a cluster, a cross-slot error fails the test even when product code
    swallowed it (the read model falls back to PostgreSQL on any RedisError,
    so a cross-slot script or pipeline would otherwise pass as "degraded")."""
    if not on_cluster():
        yield
        return
    seen: list[str] = []

    def note(error: BaseException) -> None:
        if CROSS_SLOT.search(str(error)):
            seen.append(f"{type(error).__name__}: {error}")

    real_command, real_execute = RedisCluster.execute_command, ClusterPipeline.execute

    def execute_command(self: RedisCluster, *args: Any, **kwargs: Any) -> Any:
        try:
            return real_command(self, *args, **kwargs)
        except Exception as error:
            note(error)
            raise

    def execute(self: ClusterPipeline, raise_on_error: bool = True) -> Any:
        try:
            results = real_execute(self, raise_on_error)
        except Exception as error:
            note(error)
            raise
        for result in results:
            if isinstance(result, Exception):
                note(result)
        return results

    with (
        mock.patch.object(RedisCluster, "execute_command", execute_command),
        mock.patch.object(ClusterPipeline, "execute", execute),
    ):
        yield
    assert not seen, f"cross-slot errors on the Redis Cluster: {seen[:3]}"


@pytest.fixture(scope="session", autouse=True)
def _cluster_own_keys(_run_prefix: None) -> Iterator[None]:
    """On a cluster a test's FLUSHDB and SCAN reach only the keys under the
    current prefix: the cluster's one database is shared with other runs (and
    the run's other xdist worker), and tests flush and scan it as they would
    the plain-Redis db of their own."""
    if not on_cluster():
        yield
        return
    real_scan_iter = RedisCluster.scan_iter

    def own(pattern: str | bytes | None) -> str:
        prefix = str(settings.MESSAGECENTER_KEY_PREFIX)
        text = (pattern.decode() if isinstance(pattern, bytes) else pattern) or "*"
        return text if text.startswith(prefix) else prefix + text

    def flushdb(self: RedisCluster, asynchronous: bool = False, **kwargs: Any) -> bool:
        _flush_cluster_prefix(self, str(settings.MESSAGECENTER_KEY_PREFIX))
        return True

    def scan_iter(self: RedisCluster, match: str | bytes | None = None, *args: Any, **kwargs: Any) -> Iterator[Any]:
        return real_scan_iter(self, own(match), *args, **kwargs)

    with mock.patch.object(RedisCluster, "flushdb", flushdb), mock.patch.object(RedisCluster, "scan_iter", scan_iter):
        yield


@pytest.fixture(scope="session")
def _script_cache_lock() -> Iterator[Any]:
    """A lock file per Redis server, for its script cache (see _script_cache_guard)."""
    location = str(settings.CACHES["default"]["LOCATION"])
    if settings.REDIS_EMBEDDED or on_cluster():
        yield None  # an in-process server, or a read model without scripts on this one
        return
    server = re.sub(r"[^0-9A-Za-z.]+", "-", urlsplit(location).netloc)
    with open(os.path.join(tempfile.gettempdir(), f"messagecenter-redis-scripts-{server}.lock"), "w") as handle:
        yield handle


@pytest.fixture(autouse=True)
def _script_cache_guard(_script_cache_lock: Any) -> Iterator[None]:
    """Every Redis db of a server shares its script cache. A test that flushes
    it (SCRIPT FLUSH) would make another test on the same server, in the run's
    other xdist worker or in another run, pay a NOSCRIPT reload in the middle
    of counting its round trips. So every test holds the server's lock shared,
    and one that flushes the script cache first takes it exclusively: it waits
    for the tests running beside it to end, and no other test starts until it ends."""
    handle = _script_cache_lock
    if handle is None:
        yield
        return
    real_script_flush = Redis.script_flush

    def script_flush(self: Redis, *args: Any, **kwargs: Any) -> Any:
        fcntl.flock(handle, fcntl.LOCK_EX)  # shared -> exclusive (let go first, then waited for)
        return real_script_flush(self, *args, **kwargs)

    fcntl.flock(handle, fcntl.LOCK_SH)
    try:
        with mock.patch.object(Redis, "script_flush", script_flush):
            yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def _clean_redis(
    _run_prefix: None, _cluster_slot_guard: None, _cluster_own_keys: None, _script_cache_guard: None
) -> Iterator[None]:
    flush_redis()
    yield
    flush_redis()


@pytest.fixture
def redis() -> Any:
    return get_redis()


@pytest.fixture
def operator(db: None) -> Any:
    return SuperuserFactory(username="olivia-operator")


@pytest.fixture
def recipient(db: None) -> Any:
    return UserFactory(username="alice")


@pytest.fixture
def other_recipient(db: None) -> Any:
    return UserFactory(username="bob")


@pytest.fixture
def outsider(db: None) -> Any:
    return UserFactory(username="mallory")


def client_for(user: Any) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture
def anon_client() -> APIClient:
    return APIClient()


@pytest.fixture
def operator_client(operator: Any) -> APIClient:
    return client_for(operator)


@pytest.fixture
def recipient_client(recipient: Any) -> APIClient:
    return client_for(recipient)


@pytest.fixture
def outsider_client(outsider: Any) -> APIClient:
    return client_for(outsider)


@contextmanager
def round_trips() -> Iterator[list[int]]:
    """The read model client's round trips on a single Redis (``bench.harness.RoundTrips``)."""
    count = [0]
    with RoundTrips(get_redis()) as trips:
        yield count
    count[0] = trips.count


def assert_error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    """The response is the API's error envelope with this status (and code)."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}, body
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code, body
    return body["error"]


ROOT = Path(__file__).resolve().parent.parent
CLUSTER_SCRIPT = ROOT / "scripts" / "redis-cluster.sh"
CLUSTER_URL = os.environ.get("MESSAGECENTER_TEST_CLUSTER_URL", "redis://127.0.0.1:7000/0")


def _cluster_answers() -> bool:
    try:
        RedisCluster.from_url(CLUSTER_URL, socket_connect_timeout=0.3).ping()
    except (RedisError, RedisClusterException, OSError):
        return False
    return True


CLUSTER_DIR = Path(os.environ.get("REDIS_CLUSTER_DIR", "/tmp/messagecenter-redis-cluster"))  # noqa: S108


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """A real Redis Cluster: the one at MESSAGECENTER_TEST_CLUSTER_URL, or the
    local six-node cluster, started here when none answers, and stopped after
    the session unless another session still uses it. Sessions (the xdist
    workers of a run, runs side by side) share it as ``scripts/redis-cluster.sh
    with`` does: each takes turns to join and to leave, holds the users' lock
    shared while it uses the cluster, and the last one out stops a cluster that
    one of them started."""
    mark = CLUSTER_DIR / "started-for-a-run"
    with open(f"{CLUSTER_DIR}.turn.lock", "w") as turn, open(f"{CLUSTER_DIR}.users.lock", "w") as users:
        with _flocked(turn):
            if not _cluster_answers():
                subprocess.run(["bash", str(CLUSTER_SCRIPT), "start"], check=True, capture_output=True)  # noqa: S603, S607
                mark.touch()
            assert _cluster_answers(), f"no Redis Cluster answers at {CLUSTER_URL}"
            fcntl.flock(users, fcntl.LOCK_SH)
        yield CLUSTER_URL
        fcntl.flock(users, fcntl.LOCK_UN)
        with _flocked(turn):
            try:
                fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return  # another run is on it: the last one out stops it
            if mark.exists():
                subprocess.run(["bash", str(CLUSTER_SCRIPT), "stop"], check=False, capture_output=True)  # noqa: S603, S607


@contextmanager
def _flocked(handle: Any) -> Iterator[None]:
    fcntl.flock(handle, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)


def _celery_workers_unavailable() -> str | None:
    """Why real Celery workers cannot run here, or None when they can."""
    if "sqlite" in settings.DATABASES["default"]["ENGINE"]:
        return "the database is SQLite (a worker process cannot share the test database)"
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=0.5).close()
    except OSError:
        return "RabbitMQ does not answer on 127.0.0.1:5672"
    return None


# Tables whose rows come from migrate (post_migrate), not from tests.
MIGRATE_ROWS = frozenset({"django_content_type", "auth_permission"})


def _sql_flush_test_rows(
    style: Any, connection: Any, reset_sequences: bool = True, allow_cascade: bool = False
) -> list[str]:
    """The SQL the ``flush`` after each database test runs: a DELETE per table,
    leaving the rows migrate made (content types, permissions).

    Django's own flush is one TRUNCATE of every table (~60-90 ms on PostgreSQL
    here: new files for each of ~35 tables), after which post_migrate creates
    the content types and permissions again (~50 ms): most of the time of a
    small test. A test leaves a few rows, which DELETEs remove in about a
    millisecond, and post_migrate then finds its rows and only checks them.
    The constraints are deferred, so the order of the DELETEs does not matter.
    A flush asked with other options (reset sequences, cascade) is Django's own.
    """
    if reset_sequences or allow_cascade:
        return management_sql.sql_flush(style, connection, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
    tables = connection.introspection.django_table_names(only_existing=True, include_views=False)
    quote = connection.ops.quote_name
    # Table names from the database's own catalogue, quoted: no outside input.
    return [f"DELETE FROM {quote(table)};" for table in sorted(tables) if table not in MIGRATE_ROWS]  # noqa: S608


@pytest.fixture(scope="session", autouse=True)
def _fast_flush() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(flush_command, "sql_flush", _sql_flush_test_rows)
        yield


# What WhiteNoise's list of static files depends on (the files, and the headers it gives each).
STATIC_SETTINGS = (
    "DEBUG",
    "FORCE_SCRIPT_NAME",
    "INSTALLED_APPS",
    "STATIC_ROOT",
    "STATIC_URL",
    "STATICFILES_DIRS",
    "STATICFILES_FINDERS",
    "WHITENOISE_ADD_HEADERS_FUNCTION",
    "WHITENOISE_ALLOW_ALL_ORIGINS",
    "WHITENOISE_CHARSET",
    "WHITENOISE_IMMUTABLE_FILE_TEST",
    "WHITENOISE_INDEX_FILE",
    "WHITENOISE_MAX_AGE",
    "WHITENOISE_MIMETYPES",
    "WHITENOISE_STATIC_PREFIX",
)


@pytest.fixture(scope="session", autouse=True)
def _static_files_listed_once() -> Iterator[None]:
    """Every test client loads the middleware anew, and WhiteNoise then lists
    and stats every static file the finders know (~170 files, ~5 ms): a test
    paid that for each client it made, and many make one per request. The
    files do not change during a run: each process lists them once for each
    value of the settings they depend on, and every middleware gets the list."""
    real = WhiteNoiseMiddleware.add_files_from_finders
    listed: dict[str, dict[str, Any]] = {}

    def add_files_from_finders(self: WhiteNoiseMiddleware) -> None:
        key = repr([getattr(settings, name, None) for name in STATIC_SETTINGS])
        if key in listed:
            self.files.update(listed[key])
            return
        before = dict(self.files)
        real(self)
        listed[key] = {url: file for url, file in self.files.items() if before.get(url) is not file}

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(WhiteNoiseMiddleware, "add_files_from_finders", add_files_from_finders)
        yield


DESELECTION_NOTES = pytest.StashKey[list[str]]()


@dataclass(frozen=True)
class DeselectedInWorker:
    """A test an xdist worker deselected, as the controller's summary counts it
    (plugins read the entries of the summary's stats like reports)."""

    nodeid: str


def note_deselection(config: pytest.Config, text: str) -> None:
    """Say why tests were deselected. Under xdist the workers collect, and what
    they print is not shown: the controller prints the first worker's notes."""
    print(f"\n{text}")
    output = getattr(config, "workeroutput", None)
    if output is not None:
        output.setdefault("deselection_notes", []).append(text)


def pytest_deselected(items: list[pytest.Item]) -> None:
    # In an xdist worker: the ids go to the controller, whose summary line counts
    # them (the controller passes them on as DeselectedInWorker: nothing more to do).
    if not items or not isinstance(items[0], pytest.Item):
        return
    output = getattr(items[0].config, "workeroutput", None)
    if output is not None:
        output.setdefault("deselected", []).extend(item.nodeid for item in items)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """The xdist controller: count and keep the deselections of the first worker
    that finishes (every worker collects the same tests)."""
    output = getattr(node, "workeroutput", None) or {}
    config = node.config
    if "deselected" not in output or config.stash.get(DESELECTION_NOTES, None) is not None:
        return
    config.stash[DESELECTION_NOTES] = list(output.get("deselection_notes", []))
    config.hook.pytest_deselected(items=[DeselectedInWorker(nodeid) for nodeid in output["deselected"]])


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    for text in config.stash.get(DESELECTION_NOTES, []):
        terminalreporter.write_line(text)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every database test runs with real transactions.

    The read model is written from ``transaction.on_commit`` callbacks; in
    a test wrapped in one big atomic block they would never fire. Real
    commits cost a table flush per test and keep production semantics.
    """
    if shutil.which("redis-server") is None:
        # A machine with nothing but Python (the embedded default) cannot start
        # a cluster: those tests are deselected, visibly, not skipped.
        cluster_items = [item for item in items if item.get_closest_marker("cluster")]
        if cluster_items:
            config.hook.pytest_deselected(items=cluster_items)
            items[:] = [item for item in items if not item.get_closest_marker("cluster")]
            note_deselection(
                config, f"{len(cluster_items)} Redis Cluster tests deselected: redis-server is not installed"
            )
    if "sqlite" in settings.DATABASES["default"]["ENGINE"]:
        pg_items = [item for item in items if item.get_closest_marker("postgres")]
        if pg_items:
            config.hook.pytest_deselected(items=pg_items)
            items[:] = [item for item in items if not item.get_closest_marker("postgres")]
            note_deselection(config, f"{len(pg_items)} PostgreSQL concurrency tests deselected: the database is SQLite")
    worker_items = [item for item in items if item.get_closest_marker("celery_worker")]
    worker_off = _celery_workers_unavailable() if worker_items else None
    if worker_off:
        config.hook.pytest_deselected(items=worker_items)
        items[:] = [item for item in items if not item.get_closest_marker("celery_worker")]
        note_deselection(config, f"{len(worker_items)} Celery worker tests deselected: {worker_off}")
    if on_cluster():
        # Tests that cannot work on a cluster by design (each carries its
        # reason): deselected visibly, never skipped silently.
        # The tests/faults tests with a private redis-server (marker redis_server)
        # point Django's cache at it and stop it to take the read model down;
        # on a cluster the read model stays on the cluster, so they count too.
        def off_reason(item: pytest.Item) -> str | None:
            marker = item.get_closest_marker("not_on_cluster")
            if marker is not None:
                return str(marker.kwargs.get("reason") or "no reason given")
            if item.get_closest_marker("redis_server") is not None:
                return "stops a private single redis-server to take the read model down (marker redis_server)"
            return None

        off = [item for item in items if off_reason(item)]
        if off:
            config.hook.pytest_deselected(items=off)
            items[:] = [item for item in items if not off_reason(item)]
            reasons: dict[str, int] = {}
            for item in off:
                reason = str(off_reason(item))
                reasons[reason] = reasons.get(reason, 0) + 1
            lines = [f"{len(off)} tests deselected on the Redis Cluster (marker not_on_cluster):"]
            lines += [f"  {count} x {reason}" for reason, count in sorted(reasons.items())]
            note_deselection(config, "\n".join(lines))
    for item in items:
        marker = item.get_closest_marker("django_db")
        if marker is not None and not marker.kwargs.get("transaction"):
            item.add_marker(pytest.mark.django_db(*marker.args, **{**marker.kwargs, "transaction": True}), append=False)
