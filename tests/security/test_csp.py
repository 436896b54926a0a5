"""A Content-Security-Policy on every page, and nothing inline for it to
forbid: every script is a static file, so ``script-src 'self'`` holds and an
injected script or ``on*`` handler never runs."""

import re
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from tests.factories import SuperuserFactory

pytestmark = pytest.mark.django_db

ROOT = Path(settings.BASE_DIR)
TEMPLATE_DIRS = [ROOT / "templates", *sorted(ROOT.glob("*/templates"))]
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.IGNORECASE)
INLINE_HANDLER = re.compile(r"<[^>]+\son[a-z]+\s*=", re.IGNORECASE)


def _directives(response: Any) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    parts = [part.strip().split() for part in header.split(";") if part.strip()]
    return {part[0]: part[1:] for part in parts}


def test_no_template_has_inline_script_or_handlers() -> None:
    templates = [path for folder in TEMPLATE_DIRS for path in folder.rglob("*.html")]
    assert len(templates) > 10
    for path in templates:
        text = path.read_text()
        assert not INLINE_SCRIPT.search(text), path
        assert not INLINE_HANDLER.search(text), path


@pytest.mark.parametrize(
    "path",
    [
        "/accounts/login/",
        "/inbox/",
        "/announcements/",
        "/admin/",
        "/admin/messagecenter/message/add/",
        "/admin/messagecenter/bulletin/add/",
        "/api/docs/",
        "/api/redoc/",
        "/no-such-page/",
    ],
)
def test_every_page_carries_the_policy(path: str) -> None:
    client = Client()
    if path != "/accounts/login/":  # signed in, the login page redirects
        client.force_login(SuperuserFactory(username="root"))
    response = client.get(path)
    assert response.status_code in {200, 404}, (path, response.status_code)
    directives = _directives(response)
    assert directives["script-src"] == ["'self'"], path
    assert directives["object-src"] == ["'none'"]
    assert directives["frame-ancestors"] == ["'none'"]
    if response["Content-Type"].startswith("text/html"):
        body = response.content.decode()
        assert not INLINE_SCRIPT.search(body), (path, INLINE_SCRIPT.search(body))
        assert not INLINE_HANDLER.search(body), path


def test_the_api_docs_load_their_start_up_script_from_a_url() -> None:
    client = Client()
    client.force_login(SuperuserFactory(username="root"))
    page = client.get("/api/docs/").content.decode()
    script = re.search(r'<script src="([^"]*\?script[^"]*)"', page)
    assert script is not None, page
    answer = client.get(script.group(1).replace("&amp;", "&"))
    assert answer.status_code == 200
    assert b"SwaggerUIBundle" in answer.content
