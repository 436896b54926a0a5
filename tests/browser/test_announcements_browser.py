"""Announcements in a real browser: the pinned banner goes once it is opened."""

from typing import Any

import pytest
from playwright.sync_api import expect

from notices.services import announcement_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_opening_a_pinned_announcement_removes_the_banner(open_page: Any, operator: Any, recipient: Any) -> None:
    announcement_create(
        author=operator, title="New terms", body_html="<p>Read me.</p>", platforms=["user"], pinned=True
    )
    announcement_create(author=operator, title="Routine note", body_html="<p>Nothing big.</p>", platforms=["user"])
    page = open_page(recipient, "/inbox/")
    banner = page.locator(".notices-banner")
    expect(banner).to_be_visible()
    expect(banner.get_by_role("link")).to_have_text(["New terms"])
    announcements_chip = page.locator("[data-chip='kind:announcement'] .mc-count")
    expect(announcements_chip).to_have_text("2")
    expect(page.locator("#unread-badge")).to_have_text("2")

    banner.get_by_role("link", name="New terms").click()
    expect(page.get_by_role("heading", name="New terms")).to_be_visible()

    page.goto("/inbox/")
    expect(page.locator(".notices-banner")).to_have_count(0)
    expect(announcements_chip).to_have_text("1")
    expect(page.locator("#unread-badge")).to_have_text("1")
    page.goto("/announcements/")
    expect(page.locator(".notices-pinned .item.read .item-title")).to_have_text("New terms")
    expect(page.locator(".item.unread .item-title")).to_have_text(["Routine note"])
