"""PostgreSQL down: every endpoint and page answers 503 with ``Retry-After``
(the error envelope for the API, a page for people), while the reads Redis
serves on its own keep answering 200.

The outage is real: the test closes the project's connection and points it at
a local port that is bound but never listens, so every connect is refused by
the kernel, exactly as when the server is stopped. (A bound socket keeps the
port ours: no other test process can start a server on it meanwhile.)
"""

import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.conf import settings
from django.db import OperationalError, connections
from django.test import Client, RequestFactory
from rest_framework.test import APIClient

from core.views import server_error
from durability import outbox
from tests.conftest import client_for
from tests.security.seed import World, build_world, item_id, warm_up

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@contextmanager
def postgres_down() -> Iterator[None]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as closed:
        closed.bind(("127.0.0.1", 0))
        conn = connections["default"]
        saved = dict(conn.settings_dict)
        conn.close()
        # The pool keeps connections to the old address: a new one is built
        # from the new settings, and waits a short while for a connection
        # that never comes (a request's wait is the pool's timeout).
        # The PostgreSQL backend's connection pool (Django 5.1+), not on django-stubs' base wrapper.
        conn.close_pool()  # type: ignore[attr-defined]
        options = dict(saved.get("OPTIONS") or {})
        if options.get("pool"):
            options["pool"] = {**options["pool"], "timeout": 0.2}
        conn.settings_dict.update(HOST="127.0.0.1", PORT=str(closed.getsockname()[1]), OPTIONS=options)
        try:
            yield
        finally:
            conn.close()
            # The PostgreSQL backend's connection pool (Django 5.1+), not on django-stubs' base wrapper.
            conn.close_pool()  # type: ignore[attr-defined]
            conn.settings_dict.clear()
            conn.settings_dict.update(saved)


class Clients:
    def __init__(self, world: World) -> None:
        # Sign-ins first: a login saves the user, which drops the cached
        # credentials the token clients then fill again.
        self.page = Client(raise_request_exception=False)
        self.page.force_login(world.alice)
        assert self.page.get("/inbox/").status_code == 200
        self.alice = client_for(world.alice)
        warm_up(self.alice)
        self.operator = client_for(world.operator)
        assert self.operator.get("/api/v1/me/").status_code == 200
        self.anon = APIClient()
        for client in (self.alice, self.operator, self.anon):
            client.raise_request_exception = False


@pytest.fixture
def world(db: None, redis: Any) -> World:
    return build_world()


@pytest.fixture
def clients(world: World) -> Clients:
    return Clients(world)


def _retry_after() -> str:
    return str(settings.DATABASE_RETRY_AFTER_SECONDS)


def assert_unavailable_envelope(response: Any, label: str = "") -> None:
    assert response.status_code == 503, (label, response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json")
    assert json.loads(response.content) == {
        "error": {"code": "service_unavailable", "message": "The service is briefly unavailable; please retry shortly."}
    }
    assert response["Retry-After"] == _retry_after()


def assert_unavailable_page(response: Any) -> None:
    assert response.status_code == 503, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("text/html")
    assert b"Briefly unavailable" in response.content
    assert response["Retry-After"] == _retry_after()


# Every API call that needs PostgreSQL (reads Redis cannot serve alone, and writes).
NEEDS_POSTGRES = [
    ("alice", "post", lambda w: f"/api/v1/announcements/{w.public_announcement.pk}/read/", None),
    ("alice", "post", lambda w: f"/api/v1/announcements/{w.public_announcement.pk}/unread/", None),
    ("alice", "post", lambda w: f"/api/v1/inbox/{item_id(w.alice_message)}/read/", None),
    ("alice", "post", lambda w: "/api/v1/inbox/read-all/", {}),
    ("anon", "post", lambda w: "/api/v1/auth/token/", {"username": "alice", "password": "whatever"}),
    (
        "operator",
        "post",
        lambda w: "/api/v1/manage/announcements/",
        {"title": "T", "body_html": "<p>b</p>", "platforms": ["user"]},
    ),
    (
        "operator",
        "post",
        lambda w: "/api/v1/manage/messages/",
        lambda w: {"category": "system", "title": "M", "body_html": "<p>m</p>", "to": {"users": [str(w.alice.pk)]}},
    ),
    ("operator", "post", lambda w: f"/api/v1/manage/user-groups/{w.alice_group.pk}/members/", {"user_ids": [1]}),
    ("operator", "delete", lambda w: f"/api/v1/manage/bulletins/{w.alice_bulletin.pk}/", None),
]


def test_api_calls_needing_postgres_are_503_with_the_envelope(world: World, clients: Clients) -> None:
    with postgres_down():
        for who, method, path, body in NEEDS_POSTGRES:
            # Inbox marks skip PostgreSQL while this process recently saw no
            # pending marks (durability.outbox); forgetting that makes them ask.
            outbox.forget_local_state()
            client = getattr(clients, who)
            resolved = path(world)
            data = body(world) if callable(body) else body
            response = getattr(client, method)(resolved, data, format="json")
            assert_unavailable_envelope(response, resolved)
    # Back up: the same connection settings serve again.
    assert clients.alice.get(f"/api/v1/announcements/{world.public_announcement.pk}/").status_code == 200


def test_reads_redis_serves_keep_answering(world: World, clients: Clients) -> None:
    mine = item_id(world.alice_message)
    with postgres_down():
        inbox = clients.alice.get("/api/v1/inbox/")
        assert inbox.status_code == 200, inbox.content
        assert mine in {row["id"] for row in inbox.json()["results"]}
        counts = clients.alice.get("/api/v1/inbox/counts/")
        assert counts.status_code == 200
        assert counts.json()["unread"] >= 1
        detail = clients.alice.get(f"/api/v1/inbox/{mine}/")
        assert detail.status_code == 200
        assert detail.json()["title"] == "For alice"
        assert clients.alice.get("/api/v1/announcements/counts/").json()["unread"] == 2
        # The list's summaries are read-through entries the warm-up filled.
        listed = clients.alice.get("/api/v1/announcements/")
        assert listed.status_code == 200, listed.content[:300]
        assert str(world.public_announcement.pk) in {row["id"] for row in listed.json()["results"]}
        assert len(listed.json()["results"]) == 2
        assert clients.alice.get("/api/v1/me/").json()["username"] == "alice"
        # The inbox page renders from Redis; its pinned-announcement banner
        # (a PostgreSQL query) is left out instead of failing the page.
        page = clients.page.get("/inbox/")
        assert page.status_code == 200, page.content[:300]
        assert b"For alice" in page.content
        item_page = clients.page.get(f"/inbox/{mine}/")
        assert item_page.status_code == 200
        assert b"For alice" in item_page.content


def test_pages_needing_postgres_are_a_friendly_503(world: World, clients: Clients) -> None:
    anon = Client(raise_request_exception=False)
    with postgres_down():
        assert_unavailable_page(clients.page.get("/announcements/"))
        assert_unavailable_page(clients.page.get(f"/announcements/{world.public_announcement.pk}/"))
        assert_unavailable_page(anon.post("/accounts/login/", {"username": "alice", "password": "whatever"}))
        health = anon.get("/healthz")
        assert health.status_code == 503
        assert health.json() == {"status": "error", "database": "down", "redis": "ok"}
        assert health["Retry-After"] == _retry_after()


@pytest.mark.parametrize(("path", "page"), [("/api/v1/inbox/", False), ("/inbox/", True)])
def test_an_outage_outside_a_view_is_503_too(path: str, page: bool) -> None:
    # A middleware or the session saved on the way out raise outside any view:
    # Django hands those to handler500, which must tell an outage apart.
    request = RequestFactory().get(path)
    try:
        raise OperationalError("connection refused")
    except OperationalError:
        response = server_error(request)
    (assert_unavailable_page if page else assert_unavailable_envelope)(response)


def test_other_server_errors_stay_500() -> None:
    request = RequestFactory().get("/api/v1/inbox/")
    try:
        raise ZeroDivisionError
    except ZeroDivisionError:
        response = server_error(request)
    assert response.status_code == 500
    assert not response.has_header("Retry-After")
