"""Real-browser fixtures: one headless Chromium per test session, a fresh
context (cookies, storage) per test, pages signed in by session cookie.

Chromium is the system one (``/usr/bin/chromium``; CI installs it). A
missing browser fails the tests with a clear message instead of skipping
them: a silently skipped browser suite proves nothing.
"""

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from core.local_cache import local_caches_clear

CHROMIUM = Path(os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# Generous for a loaded CI machine, short enough to fail fast.
TIMEOUT_MS = 10_000


@pytest.fixture(scope="package", autouse=True)
def _orm_beside_playwright() -> Iterator[None]:
    """The Playwright sync API keeps an event loop marked running in this thread,
    so Django refuses ORM calls from test code ("async context"). The test code
    is not async: allow them while (and only while) the browser tests run."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        yield


@pytest.fixture(scope="package")
def browser(_orm_beside_playwright: None) -> Iterator[Any]:
    """One Chromium for the browser tests; stopped after them, with its event loop."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"Chromium not found at {CHROMIUM}: install it (apt-get install chromium) or set CHROMIUM_PATH. "
            "Never run `playwright install` here.",
            pytrace=False,
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(autouse=True)
def _fresh_notice_cache() -> Iterator[None]:
    # Redis is flushed around each test: start with a cold id-list cache too.
    local_caches_clear()
    yield
    local_caches_clear()


@pytest.fixture
def open_page(browser: Any, live_server: Any) -> Iterator[Callable[..., Any]]:
    """``open_page(user, path, width=...)``: a page of a fresh context signed in as ``user``."""
    contexts: list[Any] = []

    def _open(
        user: Any,
        path: str = "/inbox/",
        *,
        width: int = 1280,
        height: int = 900,
        locale: str = "en-US",
        color_scheme: str = "light",
        timezone_id: str = "UTC",
    ) -> Any:
        client = Client()
        client.force_login(user)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME]
        # locale sets Accept-Language (the page's language) and Intl's default.
        context = browser.new_context(
            base_url=live_server.url,
            viewport={"width": width, "height": height},
            locale=locale,
            color_scheme=color_scheme,
            timezone_id=timezone_id,
        )
        context.set_default_timeout(TIMEOUT_MS)
        context.add_cookies([{"name": cookie.key, "value": cookie.value, "url": live_server.url}])
        contexts.append(context)
        page = context.new_page()
        page.goto(path)
        return page

    yield _open
    for context in contexts:
        context.close()


@pytest.fixture
def anonymous_page(browser: Any, live_server: Any) -> Iterator[Any]:
    context = browser.new_context(base_url=live_server.url)
    context.set_default_timeout(TIMEOUT_MS)
    yield context.new_page()
    context.close()
