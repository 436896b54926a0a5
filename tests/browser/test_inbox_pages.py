"""The inbox page people expect, in a real browser: rows (relative times with
the full time on hover, icons, sender, summaries that do not repeat the title),
both languages, light and dark, phone and desktop; keyboard use, undo for
deletes, "Load more", live prepending that keeps the reader's place, one bell
with announcements, mark-all-read with announcements, filter chips, the
Archived view, snooze and bulk actions on the API's contract, the language
switcher and the favicon. Screenshots of the main pages go to docs/screenshots/.
"""

import json
import re
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.conf import settings
from django.utils import timezone
from playwright.sync_api import expect

from messagecenter import services
from notices.services import announcement_create
from tests.factories import StaffFactory
from tests.messagecenter.conftest import send

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path(settings.BASE_DIR) / "docs" / "screenshots"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
LANGS = {"en": "en-US", "zh": "zh-CN"}
TEXT = {
    "en": {"heading": "Inbox", "sender": "System", "now": "just now", "html": "en", "unread": "3 unread"},
    "zh": {"heading": "收件箱", "sender": "系统", "now": "刚刚", "html": "zh-hans", "unread": "3 条未读"},
}


@pytest.fixture(autouse=True)
def _quick_streams(settings: Any) -> None:
    settings.MESSAGECENTER_LIVE_HEARTBEAT_SECONDS = 2


@pytest.fixture
def open_page(open_page: Any) -> Any:
    """The conftest's ``open_page``, returning once the inbox script has put
    its own rows in (the server's first-page rows are swapped out then)."""

    def _open(*args: Any, **kwargs: Any) -> Any:
        page = open_page(*args, **kwargs)
        if page.locator("#items").count():
            expect(page.locator("#items")).to_have_attribute("aria-busy", "false")
        return page

    return _open


def _luminance(rgb: str) -> float:
    channels = [int(c) / 255 for c in re.findall(r"\d+", rgb)[:3]]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _three_items(operator: Any, recipient: Any) -> None:
    announcement_create(
        author=operator,
        title="New terms",
        summary="We changed the terms of service.",
        body_html="<p>Read me.</p>",
        platforms=["user"],
    )
    send(
        operator,
        to={"users": [recipient]},
        category="transaction",
        title="Your order shipped",
        summary="Your order shipped: it arrives on Tuesday.",
    )
    send(
        operator, to={"users": [recipient]}, category="promotion", title="Half price", summary="Everything in the shop"
    )


@pytest.mark.parametrize("viewport", ["phone", "desktop"])
@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_inbox_in_each_language_scheme_and_size(
    open_page: Any, operator: Any, recipient: Any, lang: str, scheme: str, viewport: str
) -> None:
    _three_items(operator, recipient)
    size = PHONE if viewport == "phone" else DESKTOP
    page = open_page(recipient, locale=LANGS[lang], color_scheme=scheme, timezone_id="Asia/Shanghai", **size)
    text = TEXT[lang]
    expect(page.locator("html")).to_have_attribute("lang", text["html"])
    expect(page.get_by_role("heading", level=1)).to_have_text(text["heading"])
    rows = page.locator("#items .item")
    # Announcements are in the list with the other items, newest first.
    expect(rows.locator(".item-title")).to_have_text(["Half price", "Your order shipped", "New terms"])
    expect(page.locator("#unread-badge")).to_have_text("3")
    expect(page.locator("#inbox-summary")).to_have_text(text["unread"])
    # One icon per row, the sender, a relative time with the full local time on hover.
    expect(rows.locator(".item-icon svg")).to_have_count(3)
    # Messages name the operator who sent them; announcements come from the system.
    expect(rows.locator(".item-sender")).to_have_text(["olivia-operator", "olivia-operator", text["sender"]])
    first_time = rows.first.locator("time")
    expect(first_time).to_have_text(text["now"])
    hover = first_time.get_attribute("title") or ""
    assert str(datetime.now().year) in hover, hover
    # The reader's zone (Asia/Shanghai): the hover text names it.
    assert any(zone in hover for zone in ("China", "GMT+8", "中国", "CST")), hover
    # The summary that repeated the title shows only its rest.
    expect(rows.nth(1).locator(".mc-summary")).to_have_text("it arrives on Tuesday.")
    # Light or dark from prefers-color-scheme.
    background = _luminance(page.evaluate("getComputedStyle(document.body).backgroundColor"))
    assert (background < 0.05) if scheme == "dark" else (background > 0.8), background
    # Touch targets of 44 px at least, for every visible control of the list.
    for control in page.locator("#inbox button:visible, #inbox .tabs a:visible").all():
        box = control.bounding_box()
        assert box, control
        assert box["height"] >= 44, f"{control.inner_text()!r} is {box}"
    # Disabled bulk buttons look disabled (another colour, a not-allowed cursor).
    bulk = page.locator("[data-bulk=read]")
    expect(bulk).to_be_disabled()
    assert bulk.evaluate("el => getComputedStyle(el).cursor") == "not-allowed"
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"scrolls sideways by {overflow}px"
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"inbox-{lang}-{scheme}-{viewport}.png"), full_page=True)


def test_the_favicon_is_served(open_page: Any, recipient: Any) -> None:
    page = open_page(recipient)
    ico = page.request.get("/favicon.ico")
    assert ico.status == 200
    assert ico.body()[:4] == b"\x00\x00\x01\x00"
    svg_href = page.locator("link[rel=icon][type='image/svg+xml']").get_attribute("href")
    svg = page.request.get(svg_href)
    assert svg.status == 200
    assert b"<svg" in svg.body()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_keyboard_moves_marks_and_selects(open_page: Any, operator: Any, recipient: Any, lang: str) -> None:
    send(operator, to={"users": [recipient]}, title="Older one")
    send(operator, to={"users": [recipient]}, title="Newer one")
    page = open_page(recipient, locale=LANGS[lang])
    badge = page.locator("#unread-badge")
    expect(badge).to_have_text("2")
    rows = page.locator("#items .item")
    expect(rows).to_have_count(2)
    page.keyboard.press("j")
    expect(rows.first).to_be_focused()
    page.keyboard.press("Shift+I")
    expect(rows.first).to_have_class(re.compile(r"\bread\b"))
    expect(badge).to_have_text("1")
    expect(page.locator("#live-region")).to_have_text("Marked read." if lang == "en" else "已标为已读。")
    page.keyboard.press("u")
    expect(rows.first).to_have_class(re.compile(r"\bunread\b"))
    expect(badge).to_have_text("2")
    page.keyboard.press("j")
    expect(rows.nth(1)).to_be_focused()
    page.keyboard.press("k")
    expect(rows.first).to_be_focused()
    page.keyboard.press("x")
    expect(rows.first.locator(".row-select")).to_be_checked()
    expect(page.locator("[data-bulk=read]")).to_be_enabled()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Newer one")).to_be_visible()


def test_a_poll_answered_while_a_mark_is_on_its_way_keeps_the_mark(
    open_page: Any, operator: Any, recipient: Any
) -> None:
    """A poll that sets off while the reader's mark is still unanswered gets
    the old flag from the server: the row must keep what the reader did."""
    send(operator, to={"users": [recipient]}, title="Held mark")
    page = open_page(recipient)
    row = page.locator("#items .item", has_text="Held mark")
    page.evaluate("() => window.mcPollInbox()")  # whatever poll the load set off is done
    held: list[Any] = []
    page.route("**/api/v1/inbox/*/read/", lambda route: held.append(route))
    row.get_by_role("button", name="Mark “Held mark” read").click()
    expect(row).to_have_class(re.compile(r"\bread\b"))
    page.wait_for_function("() => true")  # let the route handler see the held request
    assert len(held) == 1
    # The poll's answer still says unread (the mark is not committed yet).
    page.evaluate("() => window.mcPollInbox()")
    assert row.evaluate("r => r.classList.contains('read')"), "the poll undid the reader's mark"
    held[0].continue_()
    expect(page.locator("#live-region")).to_have_text("Marked read.")
    expect(page.locator("#unread-badge")).to_be_hidden()
    expect(row).to_have_class(re.compile(r"\bread\b"))


def test_delete_waits_for_the_undo_window(open_page: Any, operator: Any, recipient: Any) -> None:
    send(operator, to={"users": [recipient]}, title="Keep me")
    send(operator, to={"users": [recipient]}, title="Bin me")
    page = open_page(recipient, **PHONE)
    deletes: list[str] = []
    page.on("request", lambda r: deletes.append(r.url) if r.method == "DELETE" else None)
    row = page.locator("#items .item", has_text="Bin me")
    row.get_by_role("button", name="Delete “Bin me”").click()
    expect(row).to_be_hidden()
    toast = page.locator("#toast")
    expect(toast).to_contain_text("Deleted 1 item.")
    page.get_by_role("button", name="Undo").click()
    expect(row).to_be_visible()
    expect(toast).to_be_hidden()
    page.wait_for_timeout(6500)
    assert deletes == [], "the undone delete reached the server"
    row.get_by_role("button", name="Delete “Bin me”").click()
    with page.expect_response(lambda r: r.request.method == "DELETE", timeout=10_000) as gone:
        pass
    assert gone.value.status == 204
    page.reload()
    expect(page.locator("#items .item-title")).to_have_text(["Keep me"])


def test_load_more_keeps_the_cursor(open_page: Any, operator: Any, recipient: Any) -> None:
    for n in range(5):
        send(operator, to={"users": [recipient]}, category="system", title=f"Note {n}")
    page = open_page(recipient, "/inbox/?category=system&limit=2")
    titles = page.locator("#items .item-title")
    more = page.get_by_role("button", name="Load more")
    expect(titles).to_have_count(2)
    more.click()
    expect(titles).to_have_count(4)
    more.click()
    expect(titles).to_have_count(5)
    expect(more).to_be_hidden()
    assert titles.all_text_contents() == [f"Note {n}" for n in (4, 3, 2, 1, 0)]


def test_the_all_view_merges_announcements_through_pages(open_page: Any, operator: Any, recipient: Any) -> None:
    for n in range(3):
        send(operator, to={"users": [recipient]}, title=f"Message {n}")
        announcement_create(author=operator, title=f"Notice {n}", body_html="<p>x</p>", platforms=["user"])
    page = open_page(recipient, "/inbox/?limit=2")
    titles = page.locator("#items .item-title")
    expect(titles).to_have_count(2)
    while page.get_by_role("button", name="Load more").is_visible():
        page.get_by_role("button", name="Load more").click()
        expect(page.locator("#items")).to_have_attribute("aria-busy", "false")
    expected = [t for n in (2, 1, 0) for t in (f"Notice {n}", f"Message {n}")]
    expect(titles).to_have_text(expected)


def test_new_items_arrive_above_without_moving_the_reader(open_page: Any, operator: Any, recipient: Any) -> None:
    for n in range(12):
        send(operator, to={"users": [recipient]}, title=f"Old {n}")
    page = open_page(recipient, height=500)
    rows = page.locator("#items .item")
    expect(rows).to_have_count(12)
    target = page.locator("#items .item", has_text="Old 5")
    target.scroll_into_view_if_needed()
    page.mouse.wheel(0, 150)
    page.wait_for_timeout(200)
    before = target.bounding_box()
    # A message to everyone publishes no event: the counts poll (ETag) finds it.
    send(operator, to={"everyone": True}, title="For everyone")
    page.evaluate("window.mcRefreshCounts()")
    expect(rows.first.locator(".item-title")).to_have_text("For everyone")
    after = target.bounding_box()
    assert before
    assert after
    assert abs(before["y"] - after["y"]) <= 2, (before, after)
    expect(page.locator("#live-region")).to_contain_text("1 new item")
    expect(page.locator("#live-region")).to_contain_text("For everyone")


def test_the_badge_keeps_its_room(open_page: Any, operator: Any, recipient: Any) -> None:
    page = open_page(recipient)
    link = page.get_by_role("link", name="Announcements", exact=True).first
    expect(page.locator("#unread-badge")).to_be_hidden()
    before = link.bounding_box()
    for n in range(12):
        send(operator, to={"users": [recipient]}, title=f"N {n}")
    page.evaluate("window.mcRefreshCounts()")
    expect(page.locator("#unread-badge")).to_have_text("12")
    assert link.bounding_box() == before


@pytest.mark.parametrize("include", [True, False])
def test_mark_all_read_offers_announcements(open_page: Any, operator: Any, recipient: Any, include: bool) -> None:
    _three_items(operator, recipient)
    page = open_page(recipient)
    badge = page.locator("#unread-badge")
    expect(badge).to_have_text("3")
    expect(page.locator("[data-chip='kind:announcement'] .mc-count")).to_have_text("1")
    page.get_by_role("button", name="Mark all read").click()
    dialog = page.get_by_role("dialog", name="Mark all read?")
    expect(dialog).to_be_visible()
    dialog.get_by_label("Include announcements").set_checked(include)
    dialog.get_by_role("button", name="Mark all read").click()
    if include:
        expect(badge).to_be_hidden()
        expect(page.locator("#items .item.unread")).to_have_count(0)
        expect(page.locator("#inbox-summary")).to_have_text("0 unread")
        expect(page.get_by_role("button", name="Mark all read")).to_be_disabled()
    else:
        expect(badge).to_have_text("1")
        expect(page.locator("#items .item.unread .item-title")).to_have_text(["New terms"])
        expect(page.locator("#inbox-summary")).to_have_text("1 unread")
    page.reload()
    expect(page.locator("#items .item.unread")).to_have_count(0 if include else 1)


def test_filter_chips_by_kind_and_category(open_page: Any, operator: Any, recipient: Any) -> None:
    _three_items(operator, recipient)
    page = open_page(recipient)
    page.locator("[data-chip='kind:announcement']").click()
    expect(page.locator("#items .item-title")).to_have_text(["New terms"])
    page.get_by_role("link", name=re.compile(r"^Transactions")).click()
    expect(page.locator("#items .item-title")).to_have_text(["Your order shipped"])
    page.get_by_role("link", name="Messages", exact=True).click()
    expect(page.locator("#items .item-title")).to_have_text(["Half price", "Your order shipped"])


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_empty_states_help(open_page: Any, recipient: Any, lang: str) -> None:
    page = open_page(recipient, locale=LANGS[lang])
    empty = page.locator("#empty")
    expect(empty).to_be_visible()
    expect(empty).to_contain_text("Nothing here yet." if lang == "en" else "这里还没有内容。")
    expect(page.get_by_role("button", name="Load more" if lang == "en" else "加载更多")).to_be_hidden()
    page.goto("/inbox/?unread=true")
    expect(empty).to_contain_text("You are all caught up." if lang == "en" else "全部看完了。")


def test_the_language_switcher_sets_the_language(open_page: Any, operator: Any, recipient: Any) -> None:
    send(operator, to={"users": [recipient]}, title="Hello")
    page = open_page(recipient)
    expect(page.get_by_role("heading", level=1)).to_have_text("Inbox")
    page.get_by_label("Language").select_option("zh-hans")
    expect(page.get_by_role("heading", level=1)).to_have_text("收件箱")
    expect(page.get_by_role("button", name="全部标为已读")).to_be_visible()
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    assert cookies[settings.LANGUAGE_COOKIE_NAME] == "zh-hans"
    page.goto("/announcements/")
    expect(page.get_by_role("heading", level=1)).to_have_text("公告")


class ContractRecorder:
    """Records what the page sent to the v1.1 action endpoints (method, path,
    body, CSRF header) and passes it on to the server (``to_server``), or
    answers it the way the API's contract says (for items the server does not
    have). Passed on, the server's state follows the page's: a poll the page
    makes later (a live event of the test's own sends may arrive late) lists
    what the server says, which is then what the page shows."""

    def __init__(self, page: Any, *, to_server: bool = True) -> None:
        self.calls: list[tuple[str, str, Any, str | None]] = []
        self.to_server = to_server
        page.route(re.compile(r".*/api/v1/inbox/([^/?]+/(archive|unarchive|snooze)|bulk)/$"), self._answer)

    def _answer(self, route: Any) -> None:
        request = route.request
        body = json.loads(request.post_data) if request.post_data else None
        path = re.sub(r"^https?://[^/]+", "", request.url)
        self.calls.append((request.method, path, body, request.headers.get("x-csrftoken")))
        if self.to_server:
            route.continue_()
        elif path.endswith("/bulk/"):
            # A bulk request always posts a JSON body.
            route.fulfill(status=200, content_type="application/json", body=json.dumps({"done": len(body["ids"])}))  # type: ignore[index]
        else:
            route.fulfill(status=204)


def _ids(page: Any) -> list[str]:
    return page.locator("#items .item").evaluate_all("rows => rows.map(r => r.dataset.apiId)")


def test_archive_and_snooze_call_the_contract(open_page: Any, operator: Any, recipient: Any) -> None:
    for title in ("One", "Two", "Three"):
        send(operator, to={"users": [recipient]}, title=title)
    page = open_page(recipient, timezone_id="Asia/Shanghai")
    recorder = ContractRecorder(page)
    expect(page.locator("#items .item")).to_have_count(3)
    three, two, one = _ids(page)
    page.get_by_role("button", name="Archive “Three”").click()
    expect(page.locator("#items .item-title")).to_have_text(["Two", "One"])
    page.get_by_role("button", name="Snooze “Two”").click()
    page.get_by_role("button", name="Tomorrow").click()
    expect(page.locator("#items .item-title")).to_have_text(["One"])
    page.get_by_role("button", name="Snooze “One”").click()
    # Within the year a snooze may last, so the server takes it.
    day = datetime.now(ZoneInfo("Asia/Shanghai")).date() + timedelta(days=30)
    page.get_by_label("Choose a time").fill(f"{day.isoformat()}T08:30")
    page.get_by_role("button", name="Snooze until then").click()
    expect(page.locator("#items .item")).to_have_count(0)
    method, path, body, csrf = recorder.calls[0]
    assert (method, path, body) == ("POST", f"/api/v1/inbox/{three}/archive/", None)
    assert csrf
    method, path, body, csrf = recorder.calls[1]
    assert (method, path) == ("POST", f"/api/v1/inbox/{two}/snooze/")
    assert csrf
    until = datetime.fromisoformat(body["until"].replace("Z", "+00:00")).astimezone(ZoneInfo("Asia/Shanghai"))
    tomorrow = datetime.now(ZoneInfo("Asia/Shanghai")).date() + timedelta(days=1)
    assert (until.date(), until.hour, until.minute) == (tomorrow, 9, 0)
    method, path, body, _ = recorder.calls[2]
    assert path == f"/api/v1/inbox/{one}/snooze/"
    at = datetime.combine(day, time(8, 30), tzinfo=ZoneInfo("Asia/Shanghai")).astimezone(UTC)
    assert body == {"until": at.strftime("%Y-%m-%dT%H:%M:00.000Z")}  # 08:30 in Shanghai


def test_a_poll_read_before_an_archive_does_not_bring_the_row_back(
    open_page: Any, operator: Any, recipient: Any
) -> None:
    # A poll (woken by a live event, say of the test's own sends) can be on
    # its way while the reader archives or snoozes a row. Its answer was read
    # before the action and still lists the row, which the page has removed:
    # the row must not come back as a new item.
    for title in ("One", "Two", "Three"):
        send(operator, to={"users": [recipient]}, title=title)
    page = open_page(recipient)
    expect(page.locator("#items .item-title")).to_have_text(["Three", "Two", "One"])
    expect(page.locator("#items")).to_have_attribute("aria-busy", "false")
    held: list[tuple[Any, Any]] = []
    to_hold = [0]

    def hold(route: Any) -> None:
        if route.request.method == "GET" and to_hold[0]:
            to_hold[0] -= 1
            held.append((route, route.fetch()))  # read now, answered later
        else:
            route.continue_()

    polls = re.compile(r".*/api/v1/inbox/\?.*")
    page.route(polls, hold)
    for action in ("archive", "snooze"):
        to_hold[0] = 1
        # A poll already on its way (a live event's) starts none: ask until one is held.
        for _ in range(200):
            if held:
                break
            page.evaluate("() => { window.mcPollInbox(); }")
            page.wait_for_timeout(25)
        assert len(held) == 1
        if action == "archive":
            page.get_by_role("button", name="Archive “Three”").click()
            left = ["Two", "One"]
        else:
            page.get_by_role("button", name="Snooze “Two”").click()
            page.get_by_role("button", name="Tomorrow").click()
            left = ["One"]
        expect(page.locator("#items .item-title")).to_have_text(left)
        route, answer = held.pop()
        route.fulfill(response=answer)
        page.evaluate("() => window.mcPollInbox()")  # the held poll handled, or a new one
        expect(page.locator("#items .item-title")).to_have_text(left)
    page.unroute(polls)
    # A poll that set off after the actions is the server's word: still gone.
    page.evaluate("() => window.mcPollInbox()")
    expect(page.locator("#items .item-title")).to_have_text(["One"])


def test_bulk_select_all_calls_the_contract(open_page: Any, operator: Any, recipient: Any) -> None:
    for title in ("One", "Two", "Three"):
        send(operator, to={"users": [recipient]}, title=title)
    page = open_page(recipient, **PHONE)
    recorder = ContractRecorder(page)
    expect(page.locator("#items .item")).to_have_count(3)
    ids = _ids(page)
    page.get_by_label("Select all on this page").check()
    expect(page.locator("#selected-count")).to_have_text("3 selected")
    page.get_by_role("button", name="Mark read", exact=True).first.click()
    expect(page.locator("#items .item.read")).to_have_count(3)
    page.get_by_label("Select “Two”").check()
    page.locator("[data-bulk=archive]").click()
    expect(page.locator("#items .item-title")).to_have_text(["Three", "One"])
    assert [(c[0], c[1], c[2]) for c in recorder.calls] == [
        ("POST", "/api/v1/inbox/bulk/", {"action": "read", "ids": ids}),
        ("POST", "/api/v1/inbox/bulk/", {"action": "archive", "ids": [ids[1]]}),
    ]
    assert all(c[3] for c in recorder.calls)


def test_the_archived_view_lists_from_the_api(open_page: Any, recipient: Any) -> None:
    page = open_page(recipient, "/accounts/login/")
    asked: list[str] = []
    item = {
        "id": "77",
        "kind": "message",
        "category": "system",
        "title": "Filed away",
        "summary": "",
        "created_at": "2026-11-20T10:00:00+00:00",
        "read": True,
    }

    def answer(route: Any) -> None:
        asked.append(route.request.url)
        route.fulfill(
            status=200,
            content_type="application/json",
            body=json.dumps({"results": [item], "next_cursor": None, "unread_count": 0, "unseen_count": 0}),
        )

    page.route(re.compile(r".*/api/v1/inbox/\?.*archived=true.*"), answer)
    recorder = ContractRecorder(page, to_server=False)  # item 77 lives in this test's answer only
    page.goto("/inbox/?archived=true")
    expect(page.get_by_role("heading", level=1)).to_have_text("Archived")
    expect(page.locator("#items .item-title")).to_have_text(["Filed away"])
    page.get_by_role("button", name="Unarchive “Filed away”").click()
    expect(page.locator("#items .item")).to_have_count(0)
    expect(page.locator("#empty")).to_contain_text("Nothing archived.")
    assert asked
    assert "archived=true" in asked[0]
    assert recorder.calls[0][:2] == ("POST", "/api/v1/inbox/77/unarchive/")


# --- against the real v1.1 endpoints ------------------------------------------


def test_archive_then_unarchive_end_to_end(open_page: Any, operator: Any, recipient: Any) -> None:
    send(operator, to={"users": [recipient]}, title="Stay")
    send(operator, to={"users": [recipient]}, title="File me")
    page = open_page(recipient, locale=LANGS["zh"], color_scheme="dark", **PHONE)
    badge = page.locator("#unread-badge")
    expect(badge).to_have_text("2")
    page.get_by_role("button", name="归档“File me”").click()
    expect(page.locator("#items .item-title")).to_have_text(["Stay"])
    expect(badge).to_have_text("1")
    page.get_by_role("link", name="已归档").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("已归档")
    expect(page.locator("#items .item-title")).to_have_text(["File me"])
    page.get_by_role("button", name="取消归档“File me”").click()
    expect(page.locator("#empty")).to_contain_text("没有已归档的项目。")
    page.goto("/inbox/")
    expect(page.locator("#items .item-title")).to_have_text(["File me", "Stay"])
    expect(badge).to_have_text("2")


def test_snooze_and_bulk_end_to_end(open_page: Any, operator: Any, recipient: Any) -> None:
    for title in ("One", "Two", "Three", "Four"):
        send(operator, to={"users": [recipient]}, title=title)
    page = open_page(recipient)
    badge = page.locator("#unread-badge")
    expect(badge).to_have_text("4")
    page.get_by_role("button", name="Snooze “Four”").click()
    page.get_by_role("button", name="Next week").click()
    expect(page.locator("#items .item-title")).to_have_text(["Three", "Two", "One"])
    expect(badge).to_have_text("3")
    page.get_by_label("Select “Three”").check()
    page.get_by_label("Select “Two”").check()
    page.locator("[data-bulk=read]").click()
    expect(page.locator("#live-region")).to_have_text("2 items updated.")
    expect(badge).to_have_text("1")
    page.get_by_label("Select all on this page").check()
    page.locator("[data-bulk=delete]").click()
    expect(page.locator("#items .item:visible")).to_have_count(0)
    expect(page.locator("#toast")).to_contain_text("Deleted 3 items.")
    with page.expect_response("**/api/v1/inbox/bulk/", timeout=10_000) as gone:
        pass
    assert gone.value.json() == {"done": 3}
    page.reload()
    expect(page.locator("#empty")).to_be_visible()
    expect(badge).to_be_hidden()


def test_a_woken_snooze_comes_back_on_top_live(open_page: Any, operator: Any, recipient: Any) -> None:
    nap = send(operator, to={"users": [recipient]}, title="Nap")
    send(operator, to={"users": [recipient]}, title="Awake")
    services.inbox_snooze(user=recipient, item_id=f"m{nap.pk}", until=timezone.now() + timedelta(seconds=3))
    page = open_page(recipient)
    titles = page.locator("#items .item-title")
    expect(titles).to_have_text(["Awake"])
    expect(page.locator("#unread-badge")).to_have_text("1")
    page.wait_for_timeout(3500)
    page.evaluate("window.mcRefreshCounts()")
    expect(titles).to_have_text(["Nap", "Awake"])
    expect(page.locator("#unread-badge")).to_have_text("2")
    expect(page.locator("#live-region")).to_contain_text("Nap")


def test_the_search_box_narrows_the_list_as_one_types(open_page: Any, operator: Any, recipient: Any) -> None:
    carol = StaffFactory(username="carol", first_name="Carol", last_name="Chen")
    send(carol, to={"users": [recipient]}, category="promotion", title="Winter sale", summary="Boots and coats")
    for n in range(3):
        send(operator, to={"users": [recipient]}, category="system", title=f"Sale note {n}")
    send(operator, to={"users": [recipient]}, category="system", title="Welcome")
    announcement_create(author=operator, title="Sale terms", body_html="<p>x</p>", platforms=["user"])
    announcement_create(author=operator, title="Other news", body_html="<p>x</p>", platforms=["user"])
    page = open_page(recipient, "/inbox/?limit=2")
    titles = page.locator("#items .item-title")
    expect(titles).to_have_text(["Other news", "Sale terms"])
    box = page.get_by_role("searchbox", name="Search titles and summaries")
    # Typing asks the inbox API with q (the announcements are matched in the page).
    with page.expect_request(lambda r: "/api/v1/inbox/" in r.url and "q=SALE" in r.url):
        box.fill("SALE")
    expect(titles).to_have_text(["Sale terms", "Sale note 2"])
    more = page.get_by_role("button", name="Load more")
    more.click()
    expect(titles).to_have_text(["Sale terms", "Sale note 2", "Sale note 1", "Sale note 0"])
    more.click()
    expect(titles).to_have_text(["Sale terms", "Sale note 2", "Sale note 1", "Sale note 0", "Winter sale"])
    expect(more).to_be_hidden()
    # Each row names its sender: the operator's full name, else the username; the system otherwise.
    rows = page.locator("#items .item")
    expect(rows.locator(".item-sender")).to_have_text(
        ["System", "olivia-operator", "olivia-operator", "olivia-operator", "Carol Chen"]
    )
    assert "q=SALE" in page.url  # a reload shows the same search
    # The summary is searched too, and nothing matching says so.
    box.fill("boots")
    expect(titles).to_have_text(["Winter sale"])
    box.fill("zzz")
    expect(page.locator("#empty-search")).to_be_visible()
    expect(page.locator("#empty-search-title")).to_have_text("No items match “zzz”")
    expect(titles).to_have_count(0)
    expect(page.locator("#empty")).to_be_hidden()
    # Escape clears the search: the whole list again.
    box.press("Escape")
    expect(box).to_have_value("")
    expect(titles).to_have_text(["Other news", "Sale terms"])
    expect(page.locator("#empty-search")).to_be_hidden()
    assert "q=" not in page.url
    # Within a category: the search keeps the view's filter.
    page.goto("/inbox/?category=system")
    expect(page.locator("#items")).to_have_attribute("aria-busy", "false")
    box.fill("note 1")
    expect(titles).to_have_text(["Sale note 1"])
    box.fill("winter")
    expect(page.locator("#empty-search-title")).to_have_text("No items match “winter”")
