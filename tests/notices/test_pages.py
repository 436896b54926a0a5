"""Server-rendered pages, the banner tag, the admin and the demo data."""

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.template import Context, Template
from django.test import Client, RequestFactory
from django.utils import timezone

from notices.models import Announcement
from notices.selectors import announcement_counts
from tests.notices.conftest import announce

pytestmark = pytest.mark.django_db(transaction=True)

HOUR = timedelta(hours=1)


def browser(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def live(platforms: list[str] | None = None, **kwargs: Any) -> Announcement:
    return announce(platforms, publish_at=timezone.now() - HOUR, **kwargs)


def test_pages_need_login(client: Client) -> None:
    a = live()
    for path in ("/announcements/", f"/announcements/{a.pk}/"):
        response = client.get(path)
        assert response.status_code == 302
        assert "/accounts/login/" in response["Location"]


def test_list_page_shows_pinned_first_and_marks_unread(recipient: Any) -> None:
    plain = live(title="Plain news")
    pinned = announce(["user"], title="Pinned news", pinned=True, publish_at=timezone.now() - 2 * HOUR)
    live(["customer"], title="For customers only")
    html = browser(recipient).get("/announcements/").content.decode()
    assert html.index("Pinned news") < html.index("Plain news")
    assert "For customers only" not in html
    assert f'href="/announcements/{plain.pk}/"' in html
    assert f'href="/announcements/{pinned.pk}/"' in html
    assert "(unread)" in html
    assert "<h1>Announcements</h1>" in html


def test_list_page_pages_older_by_cursor(recipient: Any) -> None:
    for i in range(4):
        announce(["user"], title=f"News {i}", publish_at=timezone.now() - (i + 1) * HOUR)
    client = browser(recipient)
    first = client.get("/announcements/?limit=2")
    assert first.context["next_cursor"]
    second = client.get("/announcements/", {"cursor": first.context["next_cursor"], "limit": 2})
    assert [i.announcement.title for i in second.context["items"]] == ["News 2", "News 3"]
    assert client.get("/announcements/?cursor=forged").status_code == 400


def test_detail_page_marks_read_and_renders_sanitised_body(recipient: Any, outsider: Any) -> None:
    a = live(body_html='<p>Safe <a href="https://example.com">link</a></p><img src=x onerror="alert(1)">')
    # Even a body that bypassed the service is sanitised on the way out.
    Announcement.objects.filter(pk=a.pk).update(body_html=a.body_html + "<script>alert(2)</script>")
    response = browser(recipient).get(f"/announcements/{a.pk}/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "<script>alert" not in html
    assert "onerror" not in html
    assert 'href="https://example.com"' in html
    assert announcement_counts(user=recipient) == {"read": 1, "unread": 0}
    theirs = live(["customer"])
    assert browser(outsider).get(f"/announcements/{theirs.pk}/").status_code == 404


def test_banner_tag_shows_unread_pinned_live_announcements(recipient: Any, anon_client: Any) -> None:
    pinned = live(title="Read me", pinned=True)
    live(title="Not pinned")
    request = RequestFactory().get("/")
    request.user = recipient
    template = Template("{% load notices_tags %}{% announcement_banner %}")
    html = template.render(Context({"request": request}))
    assert 'class="banner' in html
    assert "Read me" in html
    assert "Not pinned" not in html
    assert f'href="/announcements/{pinned.pk}/"' in html
    browser(recipient).get(f"/announcements/{pinned.pk}/")
    assert "Read me" not in template.render(Context({"request": request}))
    request.user = type("Anon", (), {"is_authenticated": False})()
    assert template.render(Context({"request": request})).strip() == ""


def test_admin_pages_and_actions(operator: Any, recipient: Any) -> None:
    a = live(["user"], title="Admin one")
    client = browser(operator)
    changelist = client.get("/admin/notices/announcement/")
    assert changelist.status_code == 200
    assert "Admin one" in changelist.content.decode()
    assert "live" in changelist.content.decode()
    change = client.get(f"/admin/notices/announcement/{a.pk}/change/")
    assert change.status_code == 200
    assert "Read statistics" in change.content.decode()
    assert "Body text" in change.content.decode()

    response = client.post(
        "/admin/notices/announcement/add/",
        {
            "title": "From admin",
            "summary": "",
            "body_html": "<p>Admin body<script>x</script></p>",
            "platforms": ["user", "customer"],
            "publish_at_0": "2020-01-01",
            "publish_at_1": "00:00:00",
            "pinned": "on",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    created = Announcement.objects.get(title="From admin")
    assert created.platforms == ["user", "customer"]
    assert created.body_html == "<p>Admin body</p>"
    assert created.author == operator
    assert announcement_counts(user=recipient) == {"read": 0, "unread": 2}

    client.post(
        "/admin/notices/announcement/",
        {"action": "unpublish", "_selected_action": [created.pk, a.pk]},
    )
    assert announcement_counts(user=recipient) == {"read": 0, "unread": 0}
    client.post("/admin/notices/announcement/", {"action": "publish_now", "_selected_action": [a.pk]})
    assert announcement_counts(user=recipient) == {"read": 0, "unread": 1}
    response = client.post(f"/admin/notices/announcement/{a.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert announcement_counts(user=recipient) == {"read": 0, "unread": 0}


def test_demo_seed_is_idempotent() -> None:
    from accounts.demo import seed as seed_core
    from notices.demo import seed

    seed_core(StringIO())
    seed(StringIO())
    first = list(Announcement.objects.order_by("pk").values_list("pk", "title", "publish_at", "pinned"))
    seed(StringIO())
    assert list(Announcement.objects.order_by("pk").values_list("pk", "title", "publish_at", "pinned")) == first
    assert len(first) == 3
    assert Announcement.objects.filter(pinned=True).count() == 1
    assert Announcement.objects.filter(publish_at__gt=timezone.now()).count() == 1
    assert Announcement.objects.filter(platform_rows__platform="customer").exclude(platform_rows__platform="user")


def test_admin_edit_goes_through_the_service(operator: Any, recipient: Any) -> None:
    a = live(["user"], title="Edit me")
    assert announcement_counts(user=recipient) == {"read": 0, "unread": 1}
    later = timezone.now() + 2 * HOUR
    response = browser(operator).post(
        f"/admin/notices/announcement/{a.pk}/change/",
        {
            "title": "Edited",
            "summary": "",
            "body_html": "<p>New body</p>",
            "platforms": ["user"],
            "publish_at_0": later.strftime("%Y-%m-%d"),
            "publish_at_1": later.strftime("%H:%M:%S"),
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    edited = Announcement.objects.get(pk=a.pk)
    assert (edited.title, edited.summary) == ("Edited", "New body")
    # Scheduled again: gone from the user's counts at once.
    assert announcement_counts(user=recipient) == {"read": 0, "unread": 0}
