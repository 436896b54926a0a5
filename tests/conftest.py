"""Named personas and clients shared by every test.

- ``operator``: a superuser (holds every model permission);
- ``recipient`` (alice) and ``other_recipient`` (bob): plain users;
- ``outsider`` (mallory): a plain user nothing is addressed to, who must get 404/403.

Every test starts with an empty read model: the Redis database the suite
uses (db 15 in CI, or the embedded fakeredis server) is flushed around it.
"""

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django_redis import get_redis_connection
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from core.breaker import reset_breakers
from core.redis import get_redis
from tests.factories import SuperuserFactory, UserFactory


def _flush() -> None:
    reset_breakers()
    get_redis().flushdb()
    connection = get_redis_connection("default")
    if connection is not get_redis():
        connection.flushdb()


@pytest.fixture(autouse=True)
def _clean_redis() -> Iterator[None]:
    _flush()
    yield
    _flush()


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


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """A real Redis Cluster: the one at MESSAGECENTER_TEST_CLUSTER_URL, or the
    local six-node cluster, started here (and stopped after the session)."""
    started = False
    if not _cluster_answers():
        subprocess.run(["bash", str(CLUSTER_SCRIPT), "start"], check=True, capture_output=True)  # noqa: S603, S607
        started = True
    assert _cluster_answers(), f"no Redis Cluster answers at {CLUSTER_URL}"
    yield CLUSTER_URL
    if started:
        subprocess.run(["bash", str(CLUSTER_SCRIPT), "stop"], check=False, capture_output=True)  # noqa: S603, S607


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
            print(f"\n{len(cluster_items)} Redis Cluster tests deselected: redis-server is not installed")
    for item in items:
        marker = item.get_closest_marker("django_db")
        if marker is not None and not marker.kwargs.get("transaction"):
            item.add_marker(pytest.mark.django_db(*marker.args, **{**marker.kwargs, "transaction": True}), append=False)
