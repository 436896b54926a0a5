"""Richer items in a real browser: answering an item's action from the inbox
row (inbox.js through the API) and from the item page (its form), the answer
shown afterwards, and a translated item in both languages."""

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from messagecenter.models import MessageResponse
from tests.messagecenter.conftest import send

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ACTIONS = [{"id": "approve", "label": "Approve"}, {"id": "decline", "label": "Decline"}]


@pytest.fixture(autouse=True)
def _quick_streams(settings: Any) -> None:
    settings.MESSAGECENTER_LIVE_HEARTBEAT_SECONDS = 2


def test_answer_an_action_from_the_row_and_see_it_in_both_languages(
    open_page: Any, operator: Any, recipient: Any
) -> None:
    message = send(
        operator,
        to={"users": [recipient]},
        title="Leave request",
        actions=ACTIONS,
        translations={"zh-hans": {"title": "请假申请"}},
    )
    page = open_page(recipient)
    row = page.locator(f'.item.js-row[data-api-id="{message.ref}"]')
    expect(row.locator(".item-title")).to_have_text("Leave request")
    approve = row.get_by_role("button", name="Approve")
    expect(approve).to_be_visible()
    # Keyboard reachable: focus it and press Enter.
    approve.focus()
    page.keyboard.press("Enter")
    answered = page.locator(f'.item.js-row[data-api-id="{message.ref}"] .mc-answered')
    expect(answered).to_have_text("You answered: Approve")
    expect(page.locator("#live-region")).to_contain_text("You answered: Approve")
    expect(page.locator(f'.item.js-row[data-api-id="{message.ref}"]')).to_have_class(re.compile(r"\bread\b"))
    assert MessageResponse.objects.get().action == "approve"
    # The same inbox in Chinese: the translated title and the answer.
    chinese = open_page(recipient, locale="zh-CN")
    row = chinese.locator(f'.item.js-row[data-api-id="{message.ref}"]')
    expect(row.locator(".item-title")).to_have_text("请假申请")
    expect(row.locator(".mc-answered")).to_contain_text("Approve")
    expect(row.get_by_role("button", name="Decline")).to_have_count(0)


def test_answer_on_the_item_page_and_read_it_in_chinese(open_page: Any, operator: Any, recipient: Any) -> None:
    message = send(
        operator,
        to={"users": [recipient]},
        title="Shift swap",
        body_html="<p>Friday for Monday?</p>",
        actions=ACTIONS,
        translations={"zh-hans": {"title": "换班", "body_html": "<p>周五换周一？</p>"}},  # noqa: RUF001
    )
    page = open_page(recipient, f"/inbox/{message.ref}/")
    expect(page.get_by_role("heading", name="Shift swap")).to_be_visible()
    page.get_by_role("button", name="Decline").click()
    expect(page.locator(".mc-answered")).to_have_text("You answered: Decline")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    chinese = open_page(recipient, f"/inbox/{message.ref}/", locale="zh-CN")
    expect(chinese.get_by_role("heading", name="换班")).to_be_visible()
    expect(chinese.locator(".prose")).to_contain_text("周五换周一")
    expect(chinese.locator(".mc-answered")).to_have_text("你的回复：Decline")  # noqa: RUF001
