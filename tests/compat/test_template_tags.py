"""The incumbent's template tags on a page of this project, under its
Content-Security-Policy: the script tag carries the page's nonce, which the
header allows, and nothing on the page is inline code."""

import re
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.template import Context, Template, TemplateSyntaxError
from django.test import Client, RequestFactory, override_settings

from notifications.signals import notify
from tests.conftest import client_for
from tests.security.test_csp import INLINE_HANDLER, INLINE_SCRIPT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.compat.urls")]

TEMPLATES = Path(settings.BASE_DIR) / "compat" / "notifications" / "templates"


def _directives(response: Any) -> dict[str, list[str]]:
    parts = [part.strip().split() for part in response["Content-Security-Policy"].split(";") if part.strip()]
    return {part[0]: part[1:] for part in parts}


def test_the_live_page_runs_under_the_policy(operator: Any, recipient: Any) -> None:
    first, _second = (notify.send(operator, recipient=recipient, verb=v)[0][1][0] for v in ("a", "b"))
    # Read in the inbox before the page loads: the badge knows it.
    ref = f"m{first.inbox_link.message_id}"
    client_for(recipient).post(f"/api/v1/inbox/{ref}/read/")
    client = Client()
    client.force_login(recipient)
    response = client.get("/compat-live/")
    assert response.status_code == 200
    body = response.content.decode()

    nonces = [value.removeprefix("'nonce-").removesuffix("'") for value in _directives(response)["script-src"]]
    assert _directives(response)["script-src"][0] == "'self'"
    assert len(nonces) == 2, nonces  # 'self' and this page's nonce
    tag = re.search(r'<script src="/static/notifications/notify-config\.js" nonce="([^"]+)"[^>]*></script>', body)
    assert tag is not None, body
    assert tag.group(1) == nonces[1]
    assert not INLINE_SCRIPT.search(body), INLINE_SCRIPT.search(body)
    assert not INLINE_HANDLER.search(body)

    assert 'data-callbacks="fill_notification_list,fill_notification_badge"' in tag.group(0)
    assert 'data-api-url="/inbox/notifications/api/unread_list/"' in tag.group(0)
    assert 'data-refresh-ms="5000"' in tag.group(0)
    assert 'data-fetch="20"' in tag.group(0)
    assert "<span class='live_notify_badge'>1</span>" in body
    assert "<ul class='live_notify_list'></ul>" in body
    assert '<p id="unread">1</p>' in body
    assert '<p id="has">True</p>' in body
    for script in ("notify.js", "notify-config.js"):
        assert client.get(f"/static/notifications/{script}").status_code == 200


def test_pages_without_the_tags_keep_self_alone(recipient: Any) -> None:
    client = Client()
    client.force_login(recipient)
    assert _directives(client.get("/inbox/notifications/"))["script-src"] == ["'self'"]


def test_an_anonymous_page_shows_no_badge() -> None:
    body = Client().get("/compat-live/").content.decode()
    assert "live_notify_badge'>" not in body
    assert '<p id="has">False</p>' in body


def test_a_nonce_given_to_the_tag_is_used() -> None:
    template = Template("{% load notifications_tags %}{% register_notify_callbacks nonce='abc123' api_name='count' %}")
    html = template.render(Context({}))
    assert ' nonce="abc123"' in html
    assert 'data-api-url="/inbox/notifications/api/unread_count/"' in html


def test_a_callback_must_be_a_name_not_code() -> None:
    template = Template("{% load notifications_tags %}{% register_notify_callbacks callbacks='alert(1)' %}")
    with pytest.raises(TemplateSyntaxError):
        template.render(Context({}))


def test_the_incumbents_tag_template_renders(recipient: Any) -> None:
    request = RequestFactory().get("/")
    request.user = recipient
    Template("{% include 'notifications/test_tags.html' %}").render(Context({"request": request, "user": recipient}))


@override_settings(DJANGO_NOTIFICATIONS_CONFIG={"USE_JSONFIELD": True})
def test_the_list_page_has_no_inline_script(operator: Any, recipient: Any) -> None:
    notify.send(operator, recipient=recipient, verb="a", actions=[{"href": "/go/", "title": "Go"}])
    client = Client()
    client.force_login(recipient)
    body = client.get("/inbox/notifications/").content.decode()
    assert 'href="/go/"' in body
    assert not INLINE_SCRIPT.search(body)
    assert not INLINE_HANDLER.search(body)


def test_no_template_of_the_app_has_inline_script_or_handlers() -> None:
    templates = list(TEMPLATES.rglob("*.html"))
    assert len(templates) == 3
    for path in templates:
        text = path.read_text()
        assert not INLINE_SCRIPT.search(text), path
        assert not INLINE_HANDLER.search(text), path
