"""The channels in a real browser: the settings page's grid (category x
channel), quiet hours, language and devices in English and Chinese, saved
and removed through its forms; the "Turn on desktop notifications" control,
which asks nothing before a click and says so plainly when the browser
refuses; the service worker served at the site's root."""

from typing import Any

import pytest
from django.utils import timezone

from messagecenter.models import PushSubscription, UserPreferences

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

P256DH = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"


def device(user: Any, name: str, agent: str) -> PushSubscription:
    return PushSubscription.objects.create(
        user=user,
        endpoint=f"https://push.example.net/{name}",
        p256dh=P256DH,
        auth="BTBZMqHH6r4Tts7J_aSIgg",
        user_agent=agent,
        created_at=timezone.now(),
    )


@pytest.mark.parametrize(
    ("locale", "heading", "digest_label"),
    [("en-US", "E-mail and desktop notifications", "In the digest"), ("zh-CN", "电子邮件和桌面通知", "放入摘要")],
)
def test_the_settings_grid_quiet_hours_and_devices(
    open_page: Any, recipient: Any, locale: str, heading: str, digest_label: str
) -> None:
    laptop = device(recipient, "laptop", "Firefox on a laptop")
    device(recipient, "phone", "Chrome on a phone")
    page = open_page(recipient, "/inbox/settings/", locale=locale)
    assert page.get_by_role("heading", name=heading).is_visible()
    rows = page.locator("#channels-form tbody tr")
    assert rows.count() == 4
    assert page.locator("select[name=email_system]").input_value() == "if_unread"
    assert page.locator("input[name=web_push_system]").is_checked()
    devices = page.locator("#devices tbody tr")
    assert devices.count() == 2
    assert "Chrome on a phone" in devices.nth(0).inner_text()

    page.locator("select[name=email_promotion]").select_option(label=digest_label)
    page.locator("input[name=web_push_system]").uncheck()
    page.locator("#quiet-enabled").check()
    page.locator("#quiet-start").fill("22:30")
    page.locator("#quiet-end").fill("06:30")
    page.locator("#quiet-timezone").select_option("Europe/Berlin")
    page.locator("#channel-language").select_option("zh-hans")
    page.locator("#channels-form button[type=submit]").click()
    page.wait_for_load_state()
    prefs = UserPreferences.objects.get(user=recipient)
    assert prefs.channels == {"promotion": {"email": "digest"}, "system": {"web_push": False}}
    # The form just saved both quiet-hour times.
    assert (prefs.quiet_start.strftime("%H:%M"), prefs.quiet_end.strftime("%H:%M")) == ("22:30", "06:30")  # type: ignore[union-attr]
    assert prefs.quiet_timezone == "Europe/Berlin"
    assert prefs.language == "zh-hans"
    # The page shows what was stored.
    assert page.locator("select[name=email_promotion]").input_value() == "digest"
    assert not page.locator("input[name=web_push_system]").is_checked()
    assert page.locator("#quiet-enabled").is_checked()

    page.locator(f"tr[data-device='{laptop.pk}'] button[type=submit]").click()
    page.wait_for_load_state()
    assert list(PushSubscription.objects.filter(user=recipient).values_list("endpoint", flat=True)) == [
        "https://push.example.net/phone"
    ]
    assert page.locator("#devices tbody tr").count() == 1


def test_desktop_notifications_wait_for_a_click_and_say_when_the_browser_refuses(
    open_page: Any, recipient: Any
) -> None:
    page = open_page(recipient, "/inbox/")
    control = page.locator("[data-push-control]")
    control.wait_for(state="visible")
    button = page.get_by_role("button", name="Turn on desktop notifications")
    assert button.is_visible()
    # Nothing asked yet: the permission is untouched.
    assert page.evaluate("Notification.permission") == "default"
    assert control.get_attribute("data-state") == "idle"
    button.click()
    # (A selector, not a script: the page's CSP allows no eval.)
    page.locator("[data-push-control]:not([data-state='asking']):not([data-state='idle'])").wait_for()
    # A headless browser with no permission granted refuses: the control says so.
    state = control.get_attribute("data-state")
    assert state in ("denied", "dismissed"), state
    status = page.locator("[data-push-status]").inner_text()
    assert "not turned on" in status or "blocked" in status
    assert not PushSubscription.objects.exists()


def test_the_service_worker_is_served_at_the_root(anonymous_page: Any) -> None:
    response = anonymous_page.request.get("/sw.js")
    assert response.status == 200
    assert "javascript" in response.headers["content-type"]
    body = response.text()
    assert "notificationclick" in body
    assert "showNotification" in body
