"""A grouped row in a real browser, in both languages: the actors line with
its plural, and expanding the row lists the group's items."""

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.messagecenter.conftest import send

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

EXPECTED = {
    "en-US": ("Dan, Cat, Ben and 2 others", "5 items in this group"),
    "zh-CN": ("Dan、Cat、Ben 和另外 2 人", "本组共 5 个项目"),
}


@pytest.mark.parametrize("locale", list(EXPECTED))
def test_a_grouped_row_names_its_actors_and_lists_its_items(
    open_page: Any, operator: Any, recipient: Any, locale: str
) -> None:
    for actor in ("Ann", "Ben", "Ben", "Cat", "Dan"):
        send(
            operator,
            to={"users": [recipient]},
            category="interaction",
            title=f"{actor} commented",
            group_key="doc:1",
            actor=actor,
        )
    send(operator, to={"users": [recipient]}, title="Plain")
    page = open_page(recipient, locale=locale)
    expect(page.locator("#items")).to_have_attribute("aria-busy", "false")
    rows = page.locator(".item.js-row")
    expect(rows).to_have_count(2)
    grouped = rows.filter(has_text="Dan commented")
    line, summary = EXPECTED[locale]
    expect(grouped.locator(".group-actors")).to_have_text(line)
    expect(grouped.locator(".group-items summary")).to_have_text(summary)
    expect(rows.filter(has_text="Plain").locator(".item-group")).to_have_count(0)
    grouped.locator(".group-items summary").click()
    expect(grouped.locator(".group-list li")).to_have_count(5)
    expect(grouped.locator(".group-list li").first).to_have_text("Dan commented")
