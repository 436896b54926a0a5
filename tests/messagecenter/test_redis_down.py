"""With Redis down: inbox calls answer 503 in the envelope, committed writes
are kept (the mirror is retried, and the rebuild restores it)."""

from io import StringIO
from typing import Any

import pytest
import redis as redis_lib
from django.core.management import call_command
from django.test import Client
from redis.backoff import NoBackoff
from redis.retry import Retry

from messagecenter import services
from messagecenter.models import Bulletin
from tests.conftest import assert_error, client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def redis_down(monkeypatch: pytest.MonkeyPatch) -> Any:
    dead = redis_lib.Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.2, socket_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )
    import core.lua
    from messagecenter.readmodel import entries, inbox, publish

    for module in (core.lua, entries, inbox, publish):
        monkeypatch.setattr(module, "get_redis", lambda: dead)
    return monkeypatch


def test_inbox_api_answers_503(recipient: Any, redis_down: Any) -> None:
    client = client_for(recipient)
    assert_error(client.get("/api/v1/inbox/"), 503, "unavailable")
    assert_error(client.post("/api/v1/inbox/m1/read/"), 503, "unavailable")
    assert_error(client.post("/api/v1/inbox/read-all/"), 503, "unavailable")


def test_inbox_page_answers_503(recipient: Any, redis_down: Any) -> None:
    browser = Client()
    browser.force_login(recipient)
    response = browser.get("/inbox/")
    assert response.status_code == 503
    assert "temporarily unavailable" in response.content.decode()


def test_committed_bulletin_survives_and_the_rebuild_restores_it(
    recipient: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import core.lua
    from messagecenter.readmodel import entries, inbox, publish

    dead = redis_lib.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    real = {m: m.get_redis for m in (core.lua, entries, inbox, publish)}
    for module in real:
        monkeypatch.setattr(module, "get_redis", lambda: dead)
    bulletin = services.bulletin_create(title="kept", body_html="", display_time=clock.now)  # no exception
    assert Bulletin.objects.filter(pk=bulletin.pk).exists()
    for module, original in real.items():
        monkeypatch.setattr(module, "get_redis", original)
    call_command("messagecenter_rebuild", stdout=StringIO())
    assert [i["id"] for i in client_for(recipient).get("/api/v1/inbox/").json()["results"]] == [f"b{bulletin.pk}"]
