"""The REST contract for announcements, black-box through the client."""

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from notices import keys as notice_keys
from notices.models import Announcement
from tests.conftest import assert_error, client_for
from tests.factories import StaffFactory
from tests.notices.conftest import announce, on_platforms

pytestmark = pytest.mark.django_db(transaction=True)

HOUR = timedelta(hours=1)


def live(platforms: list[str] | None = None, **kwargs: Any) -> Announcement:
    return announce(platforms, publish_at=timezone.now() - HOUR, **kwargs)


def test_list_detail_read_unread_counts(recipient_client: Any, recipient: Any) -> None:
    a = live(["user"], title="First", body_html="<p>Hello <b>world</b></p>")
    b = announce(["user"], title="Second", publish_at=timezone.now() - HOUR / 2, pinned=True)
    response = recipient_client.get("/api/v1/announcements/")
    assert response.status_code == 200
    body = response.json()
    assert body["next_cursor"] is None
    assert [r["id"] for r in body["results"]] == [str(b.pk), str(a.pk)]
    first = body["results"][1]
    assert set(first) >= {"id", "title", "summary", "published_at", "pinned", "read"}
    assert first["read"] is False
    assert first["title"] == "First"
    assert first["summary"] == "Hello world"
    assert first["published_at"].endswith("+00:00")
    assert body["results"][0]["pinned"] is True

    detail = recipient_client.get(f"/api/v1/announcements/{a.pk}/")
    assert detail.status_code == 200
    assert detail.json()["body_html"] == "<p>Hello <b>world</b></p>"
    assert detail.json()["read"] is False  # GET never marks read
    assert recipient_client.get("/api/v1/announcements/counts/").json() == {"read": 0, "unread": 2}

    assert recipient_client.post(f"/api/v1/announcements/{a.pk}/read/").status_code == 204
    assert recipient_client.get(f"/api/v1/announcements/{a.pk}/").json()["read"] is True
    assert recipient_client.get("/api/v1/announcements/counts/").json() == {"read": 1, "unread": 1}
    assert recipient_client.post(f"/api/v1/announcements/{a.pk}/unread/").status_code == 204
    assert recipient_client.get("/api/v1/announcements/counts/").json() == {"read": 0, "unread": 2}


def test_not_on_my_platforms_is_404(recipient_client: Any, outsider: Any) -> None:
    on_platforms(outsider, "customer")
    theirs = live(["customer"])
    scheduled = announce(["user"], publish_at=timezone.now() + HOUR)
    for pk in (theirs.pk, scheduled.pk, 999999, 10**25):
        assert_error(recipient_client.get(f"/api/v1/announcements/{pk}/"), 404, "not_found")
        assert_error(recipient_client.post(f"/api/v1/announcements/{pk}/read/"), 404, "not_found")
        assert_error(recipient_client.post(f"/api/v1/announcements/{pk}/unread/"), 404, "not_found")
    assert recipient_client.get("/api/v1/announcements/").json()["results"] == []


def test_anonymous_is_401(anon_client: Any) -> None:
    a = live()
    for method, path in [
        ("get", "/api/v1/announcements/"),
        ("get", f"/api/v1/announcements/{a.pk}/"),
        ("post", f"/api/v1/announcements/{a.pk}/read/"),
        ("get", "/api/v1/announcements/counts/"),
        ("post", "/api/v1/manage/announcements/"),
        ("patch", f"/api/v1/manage/announcements/{a.pk}/"),
        ("delete", f"/api/v1/manage/announcements/{a.pk}/"),
        ("get", f"/api/v1/manage/announcements/{a.pk}/stats/"),
    ]:
        assert_error(getattr(anon_client, method)(path), 401)


def test_manage_needs_staff_and_model_permissions(recipient_client: Any) -> None:
    a = live()
    staff = StaffFactory(username="staff-without-perms")
    staff_client = client_for(staff)
    body = {"title": "t", "body_html": "<p>b</p>", "platforms": ["user"]}
    for client in (recipient_client, staff_client):
        assert_error(client.post("/api/v1/manage/announcements/", body, format="json"), 403, "permission_denied")
        assert_error(client.patch(f"/api/v1/manage/announcements/{a.pk}/", {"title": "x"}, format="json"), 403)
        assert_error(client.delete(f"/api/v1/manage/announcements/{a.pk}/"), 403)
        assert_error(client.get(f"/api/v1/manage/announcements/{a.pk}/stats/"), 403)
    staff.user_permissions.add(Permission.objects.get(codename="change_announcement"))
    staff_client = client_for(StaffFactory._meta.model.objects.get(pk=staff.pk))
    assert staff_client.patch(f"/api/v1/manage/announcements/{a.pk}/", {"title": "x"}, format="json").status_code == 200
    assert_error(staff_client.delete(f"/api/v1/manage/announcements/{a.pk}/"), 403)
    assert Announcement.objects.get(pk=a.pk).title == "x"


def test_operator_creates_updates_and_deletes(operator_client: Any, recipient_client: Any, redis: Any) -> None:
    response = operator_client.post(
        "/api/v1/manage/announcements/",
        {"title": "Hi", "body_html": "<p>Body<script>x()</script></p>", "platforms": ["user"], "pinned": True},
        format="json",
    )
    assert response.status_code == 201, response.json()
    created = response.json()
    pk = int(created["id"])
    assert isinstance(created["id"], str)
    assert created["platforms"] == ["user"]
    assert created["pinned"] is True
    assert created["status"] == "live"
    assert created["body_html"] == "<p>Body</p>"
    assert created["publish_at"].endswith("+00:00")
    assert created["expire_at"] is None
    assert Announcement.objects.get(pk=pk).author is not None
    assert recipient_client.get("/api/v1/announcements/counts/").json() == {"read": 0, "unread": 1}

    response = operator_client.patch(
        f"/api/v1/manage/announcements/{pk}/", {"title": "Renamed", "platforms": ["customer"]}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["title"] == "Renamed"
    assert response.json()["platforms"] == ["customer"]
    assert recipient_client.get("/api/v1/announcements/counts/").json() == {"read": 0, "unread": 0}

    response = operator_client.patch(f"/api/v1/manage/announcements/{pk}/", {"platforms": ["user"]}, format="json")
    assert recipient_client.post(f"/api/v1/announcements/{pk}/read/").status_code == 204
    assert operator_client.delete(f"/api/v1/manage/announcements/{pk}/").status_code == 204
    assert recipient_client.get("/api/v1/announcements/counts/").json() == {"read": 0, "unread": 0}
    assert_error(recipient_client.get(f"/api/v1/announcements/{pk}/"), 404)
    assert redis.exists(notice_keys.bitmap("user", 0, pk)) == 0
    assert_error(operator_client.delete(f"/api/v1/manage/announcements/{pk}/"), 404, "not_found")
    assert_error(operator_client.patch(f"/api/v1/manage/announcements/{pk}/", {}, format="json"), 404)


def test_future_publish_at_is_visible_only_from_then(operator_client: Any, recipient_client: Any) -> None:
    when = (timezone.now() + HOUR).isoformat()
    response = operator_client.post(
        "/api/v1/manage/announcements/",
        {"title": "Later", "body_html": "<p>b</p>", "platforms": ["user"], "publish_at": when},
        format="json",
    )
    assert response.status_code == 201
    assert response.json()["status"] == "scheduled"
    assert recipient_client.get("/api/v1/announcements/").json()["results"] == []


GOOD = {"title": "t", "body_html": "<p>b</p>", "platforms": ["user"]}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**GOOD, "platforms": ["martian"]}, "platforms"),
        ({**GOOD, "platforms": []}, "platforms"),
        ({**GOOD, "platforms": "user"}, "platforms"),
        ({**GOOD, "platforms": [1]}, "platforms"),
        ({k: v for k, v in GOOD.items() if k != "platforms"}, "platforms"),
        ({k: v for k, v in GOOD.items() if k != "title"}, "title"),
        ({**GOOD, "title": 123}, "title"),
        ({**GOOD, "body_html": ["x"]}, "body_html"),
        ({**GOOD, "pinned": "maybe"}, "pinned"),
        ({**GOOD, "pinned": 1}, "pinned"),
        ({**GOOD, "publish_at": "yesterday"}, "publish_at"),
        ({**GOOD, "publish_at": 17}, "publish_at"),
        ({**GOOD, "publish_at": "2100-01-02T00:00:00+00:00", "expire_at": "2100-01-01T00:00:00+00:00"}, "expire_at"),
        ({**GOOD, "title": "x" * 201}, "title"),
    ],
)
def test_bad_create_is_400_and_changes_nothing(operator_client: Any, body: Any, field: str) -> None:
    response = operator_client.post("/api/v1/manage/announcements/", body, format="json")
    error = assert_error(response, 400, "invalid")
    assert field in error.get("fields", {}), error
    assert Announcement.objects.count() == 0


def test_bad_update_is_400_and_changes_nothing(operator_client: Any) -> None:
    a = live(["user"], title="Keep")
    body: dict[str, Any]
    for body in (
        {"platforms": []},
        {"title": 5},
        {"expire_at": (timezone.now() - 2 * HOUR).isoformat()},
        {"title": "New", "platforms": ["nope"]},
    ):
        assert_error(operator_client.patch(f"/api/v1/manage/announcements/{a.pk}/", body, format="json"), 400)
    fresh = Announcement.objects.get(pk=a.pk)
    assert (fresh.title, fresh.platforms, fresh.expire_at) == ("Keep", ["user"], None)


def test_malformed_json_is_400(operator_client: Any) -> None:
    response = operator_client.post("/api/v1/manage/announcements/", "{not json", content_type="application/json")
    assert_error(response, 400)


@pytest.mark.parametrize("query", ["limit=0", "limit=-3", "limit=abc", "cursor=garbage", "cursor="])
def test_bad_limit_or_cursor_is_400(recipient_client: Any, query: str) -> None:
    response = recipient_client.get(f"/api/v1/announcements/?{query}")
    if query == "cursor=":
        assert response.status_code == 200  # an empty cursor is the first page
    else:
        assert_error(response, 400)


def test_paging_with_cursor_and_capped_limit(recipient_client: Any) -> None:
    made = [announce(["user"], publish_at=timezone.now() - (i + 1) * HOUR) for i in range(5)]
    first = recipient_client.get("/api/v1/announcements/?limit=2").json()
    second = recipient_client.get(f"/api/v1/announcements/?limit=2&cursor={first['next_cursor']}").json()
    third = recipient_client.get(f"/api/v1/announcements/?limit=2&cursor={second['next_cursor']}").json()
    got = [r["id"] for page in (first, second, third) for r in page["results"]]
    assert got == [str(a.pk) for a in made]
    assert third["next_cursor"] is None
    assert len(recipient_client.get("/api/v1/announcements/?limit=1000").json()["results"]) == 5


def test_stats(operator_client: Any, recipient: Any, recipient_client: Any, other_recipient: Any) -> None:
    a = live(["user", "customer"])
    recipient_client.post(f"/api/v1/announcements/{a.pk}/read/")
    response = operator_client.get(f"/api/v1/manage/announcements/{a.pk}/stats/")
    assert response.status_code == 200
    assert response.json() == {
        "read_total": 1,
        "by_platform": {
            "user": {"read": 1, "users": 2, "ratio": 0.5},
            "customer": {"read": 0, "users": 0, "ratio": 0.0},
        },
    }
    assert_error(operator_client.get("/api/v1/manage/announcements/424242/stats/"), 404)


def test_schema_documents_every_operation_and_error(operator_client: Any) -> None:
    response = operator_client.get("/api/schema/?format=json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    expected = {
        "/api/v1/announcements/": {"get": {"200", "400", "401"}},
        "/api/v1/announcements/{announcement_id}/": {"get": {"200", "404"}},
        "/api/v1/announcements/{announcement_id}/read/": {"post": {"204", "404"}},
        "/api/v1/announcements/{announcement_id}/unread/": {"post": {"204", "404"}},
        "/api/v1/announcements/counts/": {"get": {"200", "401"}},
        "/api/v1/manage/announcements/": {"post": {"201", "400", "401", "403"}},
        "/api/v1/manage/announcements/{announcement_id}/": {
            "patch": {"200", "400", "403", "404"},
            "delete": {"204", "403", "404"},
        },
        "/api/v1/manage/announcements/{announcement_id}/stats/": {"get": {"200", "403", "404"}},
    }
    for path, methods in expected.items():
        for method, codes in methods.items():
            assert codes <= set(paths[path][method]["responses"]), (path, method)


def test_counts_endpoint_runs_no_sql_when_warm(recipient_client: Any, django_assert_num_queries: Any) -> None:
    live(["user"])
    recipient_client.get("/api/v1/announcements/counts/")  # warms auth, platform and id-list caches
    with django_assert_num_queries(0):
        assert recipient_client.get("/api/v1/announcements/counts/").json() == {"read": 0, "unread": 1}
