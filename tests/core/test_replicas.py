"""Read replicas on a real streaming replica (core/replicas.py).

The module's fixture starts a private PostgreSQL primary and a replica of it
(scripts/pg_replica_pair.py: initdb, pg_basebackup, pg_ctl, as the postgres
system user), migrates the primary, and points the project at the pair for
the module: ``default`` is the private primary, ``replica0`` its replica.
Without the server binaries the fixture fails: these tests run in the
PostgreSQL pass of CI, never skipped. On the embedded SQLite they are
deselected, visibly (marker ``replica``).

The proof that reads reach the replica: with the replica's replay paused, a
group an operator just created is missing from another operator's admin page
(a stale read, from the replica) and present on the writer's own
(read-your-writes: the primary).
"""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.management import call_command
from django.db import connections
from django.test import Client, override_settings
from rest_framework.test import APIClient

from config.settings.test import try_lock
from core import keys, replicas
from messagecenter.models import UserGroup
from scripts.pg_replica_pair import ReplicaPair, free_port
from tests.fixtures.clients import token_for

pytestmark = [pytest.mark.replica]

GROUPS_PAGE = "/admin/messagecenter/usergroup/"
_PORT_LOCKS: list[Any] = []


def _locked(port: int) -> bool:
    handle = try_lock(f"port-{port}")
    if handle is None:
        return True
    _PORT_LOCKS.append(handle)
    return False


@pytest.fixture(scope="module")
def pair(django_db_blocker: Any) -> Iterator[ReplicaPair]:
    start = 5480 + 2 * int(getattr(settings, "TEST_SLOT", 0))
    primary_port = free_port(start, taken=_locked)
    replica_port = free_port(primary_port + 1, taken=_locked)
    pair = ReplicaPair(primary_port=primary_port, replica_port=replica_port).start()
    default = connections["default"]
    saved = default.settings_dict
    with django_db_blocker.unblock():
        try:
            _close(default)
            primary = {**saved, "NAME": "mc", "USER": "postgres", "PASSWORD": "", "HOST": "127.0.0.1"}
            primary["PORT"] = str(pair.primary.port)
            default.settings_dict = primary
            replica = replicas.replica_databases([pair.replica.url], primary=primary, timeout=1.0)["replica0"]
            configured = connections.configure_settings({"default": primary, "replica0": replica})
            connections.settings["replica0"] = configured["replica0"]
            call_command("migrate", database="default", verbosity=0, interactive=False)
            pair.wait_replayed()
            with override_settings(
                DATABASE_REPLICA_ALIASES=["replica0"],
                DATABASE_REPLICA_MAX_LAG_SECONDS=30.0,
                DATABASE_REPLICA_LAG_CHECK_SECONDS=0.0,
                DATABASE_REPLICA_PIN_SECONDS=30.0,
            ):
                yield pair
        finally:
            try:
                if "replica0" in connections.settings:
                    _close(connections["replica0"])
                    del connections["replica0"]
                    del connections.settings["replica0"]
                _close(default)
                default.settings_dict = saved
                replicas.reset_health()
            finally:
                pair.close()
                while _PORT_LOCKS:
                    _PORT_LOCKS.pop().close()


def _close(connection: Any) -> None:
    connection.close()
    if getattr(connection, "pool", None) is not None:
        connection.close_pool()


class Operators(NamedTuple):
    writer: Any
    reader: Any
    writer_api: APIClient  # the writer's API client, signed with the writer's token


@pytest.fixture
def operators(pair: ReplicaPair) -> Iterator[Operators]:
    """Two superusers on the private primary, replayed on the replica; the
    writer with a token (the replica has its row too)."""
    replicas.reset_health()
    user_model = get_user_model()
    suffix = str(time.monotonic_ns())
    writer = user_model.objects.create_superuser(f"writer{suffix}", password="x")
    reader = user_model.objects.create_superuser(f"reader{suffix}", password="x")
    writer_api = _api(token_for(writer))
    pair.wait_replayed()
    yield Operators(writer, reader, writer_api)
    pair.resume_replay()


@contextmanager
def replica_queries() -> Iterator[list[str]]:
    """The SQL sent to the replica meanwhile (without connecting to it, unlike
    CaptureQueriesContext)."""
    sent: list[str] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append(sql)
        return execute(sql, params, many, context)

    with connections["replica0"].execute_wrapper(record):
        yield sent


def _api(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def _page(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _groups_page(client: Client) -> str:
    response = client.get(GROUPS_PAGE)
    assert response.status_code == 200
    return response.content.decode()


def test_reads_go_to_the_replica_and_the_writer_reads_its_own_writes(pair: ReplicaPair, operators: Operators) -> None:
    writer, reader, writer_api = operators
    writer_page, reader_page = _page(writer), _page(reader)
    pair.wait_replayed()
    pair.pause_replay()

    response = writer_api.post("/api/v1/manage/user-groups/", {"name": "made while replay is paused"}, format="json")
    assert response.status_code == 201

    with replica_queries() as on_replica:
        stale = _groups_page(reader_page)
    assert "made while replay is paused" not in stale  # read from the replica, which has not replayed it
    assert any("messagecenter_usergroup" in sql for sql in on_replica)

    with replica_queries() as on_replica:
        fresh = _groups_page(writer_page)
    assert "made while replay is paused" in fresh  # the writer is pinned to the primary
    assert not any("messagecenter_usergroup" in sql for sql in on_replica)

    pair.resume_replay()
    pair.wait_replayed()
    assert "made while replay is paused" in _groups_page(reader_page)


def test_the_pin_ends_after_its_time(pair: ReplicaPair, operators: Operators) -> None:
    writer, _reader, writer_api = operators
    writer_page = _page(writer)
    with override_settings(DATABASE_REPLICA_PIN_SECONDS=30.0):
        response = writer_api.post("/api/v1/manage/user-groups/", {"name": "pinned a while"}, format="json")
        assert response.status_code == 201
    # The pin is a cache entry that lives the setting's seconds: its lapse is
    # the entry's expiry, taken here as the entry's deletion (no wall clock).
    pin = keys.replica_pin(writer.pk)
    # django-redis's cache, typed as Django's BaseCache (which has no ttl()).
    assert 25 < cache.ttl(pin) <= 30  # type: ignore[attr-defined]
    pair.wait_replayed()
    pair.pause_replay()
    UserGroup.objects.create(name="not replayed yet")  # not a request of the writer's: no new pin
    assert "not replayed yet" in _groups_page(writer_page)  # still pinned: the primary
    cache.delete(pin)
    assert "not replayed yet" not in _groups_page(writer_page)  # the pin lapsed: the replica


def test_a_lagging_replica_sends_reads_to_the_primary(pair: ReplicaPair, operators: Operators) -> None:
    _writer, reader, _writer_api = operators
    reader_page = _page(reader)
    pair.pause_replay()
    UserGroup.objects.create(name="written while the replica lags")
    time.sleep(1.2)  # the last transaction the replica replayed is older than that now
    with override_settings(DATABASE_REPLICA_MAX_LAG_SECONDS=1.0), replica_queries() as sent:
        page = _groups_page(reader_page)
    assert "written while the replica lags" in page
    assert replicas.LAG_SQL in sent
    assert not any("messagecenter_usergroup" in sql for sql in sent)
    assert replicas._state_of("replica0").lag > 1.0


def test_a_replica_that_is_down_sends_reads_to_the_primary(pair: ReplicaPair, operators: Operators) -> None:
    _writer, reader, _writer_api = operators
    reader_page = _page(reader)
    _groups_page(reader_page)  # a pooled connection to the replica exists
    pair.replica.stop(fast=False)
    try:
        UserGroup.objects.create(name="written with the replica down")
        assert "written with the replica down" in _groups_page(reader_page)
        assert replicas._state_of("replica0").down_until > time.monotonic()
        # Remembered: the next request does not ask the replica again.
        with replica_queries() as on_replica:
            assert "written with the replica down" in _groups_page(reader_page)
        assert on_replica == []
    finally:
        pair.replica.start()
        pair.wait_streaming()
