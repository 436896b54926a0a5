"""The inbox in a real browser: sign in, badge, open, mark all read,
live delivery, operator compose, and a narrow screen."""

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.messagecenter.conftest import send

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _quick_streams(settings: Any) -> None:
    # Short heartbeats let the live server notice closed pages quickly.
    settings.MESSAGECENTER_LIVE_HEARTBEAT_SECONDS = 2


def badge(page: Any) -> Any:
    return page.locator("#unread-badge")


def test_log_in_and_see_the_unread_badge(anonymous_page: Any, operator: Any, recipient: Any) -> None:
    for n in range(3):
        send(operator, to={"users": [recipient]}, title=f"Note {n}")
    page = anonymous_page
    page.goto("/inbox/")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("pass-1234")
    page.get_by_role("button", name=re.compile("log in", re.I)).click()
    page.goto("/inbox/")
    expect(badge(page)).to_have_text("3")
    expect(badge(page)).to_have_attribute("aria-label", "3 unread")
    expect(page.locator(".items .item.unread")).to_have_count(3)


def test_opening_an_item_drops_the_count(open_page: Any, operator: Any, recipient: Any) -> None:
    send(operator, to={"users": [recipient]}, title="First")
    send(operator, to={"users": [recipient]}, title="Second")
    page = open_page(recipient)
    expect(badge(page)).to_have_text("2")
    page.get_by_role("link", name="Second").click()
    expect(page.get_by_role("heading", name="Second")).to_be_visible()
    expect(badge(page)).to_have_text("1")
    page.goto("/inbox/")
    expect(page.locator(".item.read .item-title")).to_have_text("Second")
    expect(badge(page)).to_have_text("1")


def test_mark_all_read_clears_the_badge(open_page: Any, operator: Any, recipient: Any) -> None:
    for n in range(2):
        send(operator, to={"users": [recipient]}, title=f"Note {n}")
    page = open_page(recipient)
    expect(badge(page)).to_have_text("2")
    page.get_by_role("button", name="Mark all read").click()
    page.get_by_role("dialog").get_by_role("button", name="Mark all read").click()
    expect(page.locator("#live-region")).to_have_text("Marked 2 items as read.")
    expect(badge(page)).to_be_hidden()
    expect(page.locator(".item.unread")).to_have_count(0)


def test_a_new_message_arrives_live(open_page: Any, operator: Any, recipient: Any) -> None:
    send(operator, to={"users": [recipient]}, title="Before")
    page = open_page(recipient)
    expect(badge(page)).to_have_text("1")
    expect(badge(page)).to_have_attribute("data-live", "on")
    send(operator, to={"users": [recipient]}, title="Fresh off the press")
    # Well inside the 15 s poll: only the event stream can be this quick.
    expect(badge(page)).to_have_text("2", timeout=5_000)
    expect(page.locator(".item-title").first).to_have_text("Fresh off the press", timeout=5_000)
    expect(page.locator(".tabs .mc-count").first).to_have_text("2")
    expect(page.locator("#live-region")).to_contain_text("Fresh off the press")


def test_operator_composes_and_another_session_sees_it(
    open_page: Any, operator: Any, recipient: Any, other_recipient: Any
) -> None:
    inbox = open_page(recipient)
    expect(badge(inbox)).to_have_attribute("data-live", "on")
    expect(badge(inbox)).to_be_hidden()
    admin = open_page(operator, "/admin/messagecenter/message/add/")
    admin.get_by_label("Category").select_option("system")
    admin.get_by_label("Title").fill("Maintenance tonight")
    admin.get_by_label("Body (HTML)").fill("<p>From <strong>22:00</strong> UTC.</p><script>boom()</script>")
    # The live preview shows the sanitised body rendered, as recipients will see it.
    expect(admin.locator("#body-preview strong")).to_have_text("22:00")
    expect(admin.locator("#body-preview script")).to_have_count(0)
    # Users are picked with the admin's autocomplete (select2), not typed as text.
    admin.locator(".field-users .select2-selection").click()
    admin.locator(".field-users .select2-search__field").fill("ali")
    admin.locator(".select2-results__option", has_text="alice").click()
    admin.get_by_role("button", name="Send", exact=True).click()
    expect(admin.get_by_text(re.compile(r"Sent by push to 1 user"))).to_be_visible()
    expect(badge(inbox)).to_have_text("1", timeout=5_000)
    expect(inbox.locator(".item-title")).to_have_text(["Maintenance tonight"], timeout=5_000)
    # Nobody else got it.
    bob = open_page(other_recipient)
    expect(bob.locator(".item-title")).to_have_count(0)


@pytest.mark.parametrize("path", ["/inbox/", "/announcements/"])
def test_narrow_screen_has_no_horizontal_overflow(open_page: Any, operator: Any, recipient: Any, path: str) -> None:
    send(operator, to={"users": [recipient]}, title="A fairly long title " * 4, summary="word " * 40)
    page = open_page(recipient, path, width=390, height=844)
    expect(page.locator("main")).to_be_visible()
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"{path} scrolls sideways by {overflow}px at 390px"


def test_keyboard_skip_link_and_visible_focus(open_page: Any, recipient: Any) -> None:
    page = open_page(recipient)
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content")
    expect(skip).to_be_focused()
    expect(skip).to_be_visible()
    outline = skip.evaluate("el => getComputedStyle(el).outlineStyle + ' ' + getComputedStyle(el).boxShadow")
    assert outline != "none none", "the focused skip link shows no focus ring"
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"#main$"))


def _luminance(rgb: str) -> float:
    channels = [int(c) / 255 for c in re.findall(r"\d+", rgb)[:3]]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def test_text_contrast_meets_wcag_aa(open_page: Any, operator: Any, recipient: Any) -> None:
    send(operator, to={"users": [recipient]}, title="Contrast", summary="Some summary")
    page = open_page(recipient)
    expect(badge(page)).to_have_text("1")
    # (selector, selector of the element whose background is behind it)
    pairs = [
        ("#unread-badge", "#unread-badge"),
        (".nav-link", ".topbar"),
        (".item-meta", ".item"),
        (".mc-summary", ".item"),
        (".tabs a[aria-current] .mc-count", ".tabs a[aria-current] .mc-count"),
        (".muted", "body"),
    ]
    for text, back in pairs:
        fg = page.locator(text).first.evaluate("el => getComputedStyle(el).color")
        bg = page.locator(back).first.evaluate("el => getComputedStyle(el).backgroundColor")
        light, dark = sorted([_luminance(fg), _luminance(bg)], reverse=True)
        ratio = (light + 0.05) / (dark + 0.05)
        assert ratio >= 4.5, f"{text}: {fg} on {bg} is {ratio:.2f}:1"


def test_without_the_stream_the_page_polls_with_etags(
    open_page: Any, browser: Any, operator: Any, recipient: Any
) -> None:
    send(operator, to={"users": [recipient]}, title="Before")
    page = open_page(recipient, "/accounts/login/")
    # A proxy that cuts event streams: EventSource fails, the page falls back to polling.
    page.route("**/api/v1/inbox/stream/", lambda route: route.abort())
    page.goto("/inbox/")
    expect(badge(page)).to_have_text("1")
    expect(badge(page)).to_have_attribute("data-live", "off")
    with page.expect_response("**/api/v1/inbox/counts/") as unchanged:
        page.evaluate("window.mcRefreshCounts()")
    assert unchanged.value.status == 304
    assert unchanged.value.request.headers["if-none-match"].startswith('W/"')
    send(operator, to={"users": [recipient]}, title="After")
    with page.expect_response("**/api/v1/inbox/counts/") as changed:
        page.evaluate("window.mcRefreshCounts()")
    assert changed.value.status == 200
    expect(badge(page)).to_have_text("2")
