from typing import Any

import pytest
import redis as redis_py
from redis.backoff import NoBackoff
from redis.retry import Retry

from core import readmodel


@pytest.mark.django_db
def test_health_reports_database_and_redis_up(anon_client: Any) -> None:
    response = anon_client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "redis": "ok"}


@pytest.mark.django_db
def test_health_stays_200_with_redis_down(anon_client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # A client aimed at a port nothing listens on: connection refused at once.
    dead = redis_py.Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.2, socket_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )
    monkeypatch.setattr(readmodel, "get_redis", lambda: dead)
    response = anon_client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "redis": "down"}
