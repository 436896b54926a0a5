"""CSRF on every page form and on session-authenticated API writes; throttling
of anonymous and signed-in API callers (429, the envelope, Retry-After)."""

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from tests.conftest import assert_error, client_for
from tests.fixtures.throttles import forget, throttle_rates
from tests.security.seed import World, build_world, db_state, item_id, redis_state, warm_up

pytestmark = pytest.mark.django_db(transaction=True)

_FORM = re.compile(r"<form\b([^>]*)>(.*?)</form>", re.IGNORECASE | re.DOTALL)
_ATTR = re.compile(r'(\w+)="([^"]*)"')


@pytest.fixture
def world(db: None) -> World:
    return build_world()


def _post_forms(html: str, page: str) -> list[str]:
    """The action of every ``<form method="post">`` of a page (its own URL when none)."""
    actions = []
    for attrs, inner in _FORM.findall(html):
        parsed = dict(_ATTR.findall(attrs))
        if parsed.get("method", "get").lower() != "post":
            continue
        assert 'name="csrfmiddlewaretoken"' in inner, (page, attrs)
        actions.append(parsed.get("action") or page)
    return actions


def _pages(world: World) -> dict[str, Any]:
    """Every page with a form, and who sees it."""
    return {
        "/inbox/": world.alice,
        f"/inbox/{item_id(world.alice_message)}/": world.alice,
        "/announcements/": world.alice,
        f"/announcements/{world.customer_announcement.pk}/": world.alice,
        "/accounts/login/": None,
    }


def test_every_page_form_carries_a_token_and_needs_it(world: World, redis: Any) -> None:
    forms: set[str] = set()
    for page, user in _pages(world).items():
        browser = Client()
        if user is not None:
            browser.force_login(user)
        response = browser.get(page)
        assert response.status_code == 200, page
        forms.update(_post_forms(response.content.decode(), page))
    # The hide and read-all forms of the inbox, logout in the header, the login form.
    assert {"/inbox/read-all/", "/accounts/logout/", "/accounts/login/"} <= forms
    assert any(action.endswith("/hide/") for action in forms)

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(world.alice)
    warm_up(client_for(world.alice))
    before = (db_state(), redis_state(redis))
    for action in sorted(forms):
        response = strict.post(action, {"username": "alice", "password": "pass-1234", "category": ""})
        assert response.status_code == 403, action
    assert (db_state(), redis_state(redis)) == before
    # Still signed in: the logout form did nothing either.
    assert strict.get("/inbox/").status_code == 200


def test_forms_work_with_the_token(world: World) -> None:
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(world.alice)
    page = strict.get("/inbox/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None
    response = strict.post("/inbox/read-all/", {"csrfmiddlewaretoken": token.group(1)})
    assert response.status_code == 302
    assert client_for(world.alice).get("/api/v1/inbox/counts/").json()["unread"] == 0


def test_session_api_writes_need_csrf(world: World, redis: Any) -> None:
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(world.alice)
    strict.get("/inbox/")  # sets the csrftoken cookie, as the page's JavaScript would have it
    warm_up(client_for(world.alice))
    before = (db_state(), redis_state(redis))
    ref = item_id(world.alice_message)
    for method, path in [
        ("post", "/api/v1/inbox/read-all/"),
        ("post", "/api/v1/inbox/seen/"),
        ("post", f"/api/v1/inbox/{ref}/read/"),
        ("delete", f"/api/v1/inbox/{ref}/"),
        ("post", f"/api/v1/announcements/{world.customer_announcement.pk}/read/"),
    ]:
        response = getattr(strict, method)(path, content_type="application/json")
        assert_error(response, 403, "permission_denied")
    assert (db_state(), redis_state(redis)) == before

    cookie = strict.cookies["csrftoken"].value
    response = strict.post(f"/api/v1/inbox/{ref}/read/", content_type="application/json", HTTP_X_CSRFTOKEN=cookie)
    assert response.status_code == 204
    # Reads need no token.
    assert strict.get("/api/v1/inbox/").status_code == 200


def _clients(world: World) -> tuple[str, ...]:
    """DRF's throttle keys of the world's callers."""
    return ("throttle_anon_127.0.0.1", *(f"throttle_user_{u.pk}" for u in (world.alice, world.mallory, world.operator)))


@pytest.fixture
def low_rates(world: World) -> Iterator[None]:
    with throttle_rates({"anon": "3/min", "user": "5/min"}, clients=_clients(world)):
        yield


@pytest.mark.usefixtures("low_rates")
def test_anonymous_callers_are_throttled(world: World) -> None:
    anon = Client()
    statuses = [
        anon.post(
            "/api/v1/auth/token/", {"username": "alice", "password": "wrong"}, content_type="application/json"
        ).status_code
        for _ in range(4)
    ]
    assert statuses == [400, 400, 400, 429]
    response = anon.post(
        "/api/v1/auth/token/", {"username": "alice", "password": "pass-1234"}, content_type="application/json"
    )
    assert_error(response, 429, "throttled")
    assert int(response["Retry-After"]) > 0


@pytest.mark.usefixtures("low_rates")
def test_signed_in_callers_are_throttled_per_user(world: World) -> None:
    alice = client_for(world.alice)
    statuses = [alice.get("/api/v1/inbox/counts/").status_code for _ in range(6)]
    assert statuses == [200] * 5 + [429]
    response = alice.post("/api/v1/inbox/read-all/", {}, format="json")
    assert_error(response, 429, "throttled")
    assert 0 < int(response["Retry-After"]) <= 60
    # Nothing was marked by the throttled write.
    mallory = client_for(world.mallory)
    assert mallory.get("/api/v1/inbox/counts/").status_code == 200  # another user has their own budget
    forget(*_clients(world))
    assert alice.get("/api/v1/inbox/counts/").json()["unread"] == 5
