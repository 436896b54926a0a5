"""Server-rendered inbox pages."""

import re
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from messagecenter.selectors import inbox_counts, inbox_list
from notices.services import announcement_create
from tests.factories import StaffFactory
from tests.messagecenter.conftest import send

pytestmark = pytest.mark.django_db(transaction=True)


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


def test_inbox_frame_has_chips_and_one_total(browser: Client, operator: Any, recipient: Any, clock: Any) -> None:
    # The rows come from the API (inbox.js; tests/browser); the frame carries
    # the filters and counts, and every number agrees with total_unread.
    send(operator, to={"users": [recipient]}, category="promotion", title="Big sale")
    send(operator, to={"users": [recipient]}, category="system", title="Welcome")
    announcement_create(author=operator, title="Terms", body_html="<p>x</p>", platforms=["user"])
    response = browser.get("/inbox/")
    html = response.content.decode()
    assert response.status_code == 200
    assert 'data-chip=":" aria-current="page"' not in html  # the attribute order is href, current, chip
    assert 'aria-current="page" data-chip=":"' in html
    assert 'data-count="total:">3</span>' in html
    assert 'data-count="category:promotion">1</span>' in html
    assert 'data-count="kind:announcement">1</span>' in html
    assert '<span id="inbox-summary" data-unread="2" data-announcements="1">3 unread</span>' in html
    assert "csrfmiddlewaretoken" in html
    assert 'id="row-template"' in html
    only = browser.get("/inbox/?category=promotion").content.decode()
    assert 'data-category="promotion"' in only
    assert 'aria-current="page" data-chip="category:promotion"' in only
    assert 'data-archived="true"' in browser.get("/inbox/?archived=true").content.decode()
    # A bad value falls back to the defaults rather than failing the page.
    odd = browser.get("/inbox/?category=nope&kind=nope&limit=-3").content.decode()
    assert 'data-category=""' in odd
    assert 'data-kind=""' in odd
    assert 'data-limit="20"' in odd


def test_inbox_frame_in_chinese(browser: Client, recipient: Any) -> None:
    html = browser.get("/inbox/", HTTP_ACCEPT_LANGUAGE="zh-Hans,zh;q=0.9").content.decode()
    assert '<html lang="zh-hans">' in html
    assert "收件箱" in html
    assert "全部标为已读" in html
    browser.cookies[settings.LANGUAGE_COOKIE_NAME] = "en"
    assert "全部标为已读" not in browser.get("/inbox/", HTTP_ACCEPT_LANGUAGE="zh-Hans").content.decode()


def test_favicon(client: Client) -> None:
    response = client.get("/favicon.ico")
    assert response.status_code == 200
    # The view streams: the test client's response type knows only HttpResponse.
    assert b"".join(response.streaming_content)[:4] == b"\x00\x00\x01\x00"  # type: ignore[attr-defined]


def test_item_page_marks_read_and_shows_images(browser: Client, operator: Any, recipient: Any, clock: Any) -> None:
    message = send(
        operator, to={"users": [recipient]}, title="Pics", images=["https://cdn.test/a.png"], body_html="<p>Hi</p>"
    )
    response = browser.get(f"/inbox/m{message.pk}/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "https://cdn.test/a.png" in html
    assert "<p>Hi</p>" in html
    assert inbox_counts(user=recipient)["unread"] == 0


def test_item_page_404_for_others(operator: Any, recipient: Any, outsider: Any, clock: Any) -> None:
    message = send(operator, to={"users": [recipient]})
    client = Client()
    client.force_login(outsider)
    assert client.get(f"/inbox/m{message.pk}/").status_code == 404
    assert client.post(f"/inbox/m{message.pk}/hide/").status_code == 404


@pytest.mark.parametrize("next_url", ["//evil.example/inbox/", "https://evil.example/inbox/", "/admin/"])
def test_forms_go_back_only_to_inbox_pages(
    browser: Client, operator: Any, recipient: Any, clock: Any, next_url: str
) -> None:
    message = send(operator, to={"users": [recipient]}, title="Hide me")
    response = browser.post(f"/inbox/m{message.pk}/hide/", {"next": next_url})
    assert response.status_code == 302
    assert response["Location"] == "/inbox/"


def test_hide_and_read_all_forms(browser: Client, operator: Any, recipient: Any, clock: Any) -> None:
    first = send(operator, to={"users": [recipient]}, title="First")
    send(operator, to={"users": [recipient]}, title="Second", category="promotion")
    assert browser.get(f"/inbox/m{first.pk}/hide/").status_code == 405
    response = browser.post(f"/inbox/m{first.pk}/hide/", {"next": "/inbox/"})
    assert response.status_code == 302
    assert [item.title for item in inbox_list(user=recipient).results] == ["Second"]
    response = browser.post("/inbox/read-all/", {"category": "promotion"})
    assert response.status_code == 302
    assert inbox_counts(user=recipient)["unread"] == 0


def test_csrf_is_enforced(recipient: Any, operator: Any, clock: Any) -> None:
    message = send(operator, to={"users": [recipient]})
    client = Client(enforce_csrf_checks=True)
    client.force_login(recipient)
    assert client.post(f"/inbox/m{message.pk}/hide/").status_code == 403


def _row_titles(html: str) -> list[str]:
    return re.findall(r'<a class="item-title" href="[^"]*">([^<]*)</a>', html)


def test_search_form_works_without_javascript(browser: Client, operator: Any, recipient: Any, clock: Any) -> None:
    """The search box is a GET form: ``?q=`` filters the server's rows through
    the same selector as the API, within the current view."""
    named = StaffFactory(username="dora", first_name="Dora", last_name="Diaz")
    send(named, to={"users": [recipient]}, category="promotion", title="Winter sale", summary="Boots")
    clock.advance(seconds=1)
    send(operator, to={"users": [recipient]}, category="system", title="Sale ends", summary="Soon")
    clock.advance(seconds=1)
    send(operator, to={"users": [recipient]}, category="system", title="Welcome", summary="Hello")
    html = browser.get("/inbox/").content.decode()
    assert 'role="search"' in html
    assert '<input type="search" id="inbox-search" name="q" value=""' in html
    assert '<label for="inbox-search"' in html
    assert _row_titles(html) == ["Welcome", "Sale ends", "Winter sale"]
    # Each row names its sender: the operator's full name, else the username.
    assert '<span class="item-sender">Dora Diaz</span>' in html
    assert '<span class="item-sender">olivia-operator</span>' in html

    html = browser.get("/inbox/", {"q": "SALE"}).content.decode()
    assert _row_titles(html) == ["Sale ends", "Winter sale"]
    assert 'value="SALE"' in html
    assert 'id="empty-search" class="card empty" hidden' in html
    # Combined with the view: the category stays a hidden field of the form.
    html = browser.get("/inbox/", {"q": "sale", "category": "promotion"}).content.decode()
    assert _row_titles(html) == ["Winter sale"]
    assert '<input type="hidden" name="category" value="promotion">' in html
    # The summary is searched too.
    assert _row_titles(browser.get("/inbox/", {"q": "boots"}).content.decode()) == ["Winter sale"]

    html = browser.get("/inbox/", {"q": "nothing like it", "category": "system"}).content.decode()
    assert _row_titles(html) == []
    assert 'id="empty-search" class="card empty">' in html
    assert "No items match “nothing like it”" in html
    assert 'href="/inbox/?category=system" id="clear-search"' in html
    # Too long a text is cut to the API's limit, not an error.
    assert browser.get("/inbox/", {"q": "x" * 500}).status_code == 200


def test_search_empty_state_in_chinese(browser: Client, recipient: Any) -> None:
    html = browser.get("/inbox/", {"q": "无此"}, HTTP_ACCEPT_LANGUAGE="zh-Hans").content.decode()
    assert "没有与“无此”匹配的项目" in html
