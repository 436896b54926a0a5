"""Server-rendered inbox pages."""

from typing import Any

import pytest
from django.test import Client

from tests.messagecenter.conftest import send

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser(recipient: Any) -> Client:
    client = Client()
    client.force_login(recipient)
    return client


def test_login_required(client: Client) -> None:
    response = client.get("/inbox/")
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]


def test_home_redirects_to_inbox(browser: Client) -> None:
    response = browser.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/inbox/"


def test_inbox_lists_items_with_tabs_and_counts(browser: Client, operator: Any, recipient: Any, clock: Any) -> None:
    send(operator, to={"users": [recipient]}, category="promotion", title="Big sale")
    send(operator, to={"users": [recipient]}, category="system", title="Welcome")
    response = browser.get("/inbox/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "Big sale" in html
    assert "Welcome" in html
    assert 'aria-current="page"' in html
    assert 'aria-label="2 unread"' in html
    assert "csrfmiddlewaretoken" in html
    only = browser.get("/inbox/?category=promotion").content.decode()
    assert "Big sale" in only
    assert "Welcome" not in only


def test_older_paging(browser: Client, operator: Any, recipient: Any, clock: Any) -> None:
    for i in range(3):
        clock.advance(seconds=1)
        send(operator, to={"users": [recipient]}, title=f"item-{i}")
    html = browser.get("/inbox/?limit=2").content.decode()
    assert "item-2" in html
    assert "item-0" not in html
    assert 'rel="next"' in html
    href = html.split('rel="next" href="')[1].split('"')[0].replace("&amp;", "&")
    older = browser.get("/inbox/" + href + "&limit=2").content.decode()
    assert "item-0" in older
    assert "item-2" not in older


def test_item_page_marks_read_and_shows_images(browser: Client, operator: Any, recipient: Any, clock: Any) -> None:
    message = send(
        operator, to={"users": [recipient]}, title="Pics", images=["https://cdn.test/a.png"], body_html="<p>Hi</p>"
    )
    response = browser.get(f"/inbox/m{message.pk}/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "https://cdn.test/a.png" in html
    assert "<p>Hi</p>" in html
    from messagecenter.selectors import inbox_counts

    assert inbox_counts(user=recipient)["unread"] == 0


def test_item_page_404_for_others(operator: Any, recipient: Any, outsider: Any, clock: Any) -> None:
    message = send(operator, to={"users": [recipient]})
    client = Client()
    client.force_login(outsider)
    assert client.get(f"/inbox/m{message.pk}/").status_code == 404
    assert client.post(f"/inbox/m{message.pk}/hide/").status_code == 404


def test_hide_and_read_all_forms(browser: Client, operator: Any, recipient: Any, clock: Any) -> None:
    first = send(operator, to={"users": [recipient]}, title="First")
    send(operator, to={"users": [recipient]}, title="Second", category="promotion")
    assert browser.get(f"/inbox/m{first.pk}/hide/").status_code == 405
    response = browser.post(f"/inbox/m{first.pk}/hide/", {"next": "/inbox/"})
    assert response.status_code == 302
    assert "First" not in browser.get("/inbox/").content.decode()
    response = browser.post("/inbox/read-all/", {"category": "promotion"})
    assert response.status_code == 302
    from messagecenter.selectors import inbox_counts

    assert inbox_counts(user=recipient)["unread"] == 0


def test_csrf_is_enforced(recipient: Any, operator: Any, clock: Any) -> None:
    message = send(operator, to={"users": [recipient]})
    client = Client(enforce_csrf_checks=True)
    client.force_login(recipient)
    assert client.post(f"/inbox/m{message.pk}/hide/").status_code == 403
