"""With Redis down, lists and details still answer from PostgreSQL; writes of
read state answer 503 in the envelope instead of a 500."""

from datetime import timedelta
from io import StringIO
from typing import Any
from unittest import mock

import pytest
from django.core.management import call_command
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError

from core import keys
from tests.conftest import assert_error
from tests.notices.conftest import announce

pytestmark = pytest.mark.django_db


def test_redis_down_lists_and_details_fall_back(recipient_client: Any, operator_client: Any) -> None:
    a = announce(["user"], publish_at=timezone.now() - timedelta(hours=1))
    announce(["customer"], publish_at=timezone.now() - timedelta(hours=1))
    down = mock.patch("notices.readmodel.get_redis", side_effect=RedisConnectionError("down"))
    with down:
        listed = recipient_client.get("/api/v1/announcements/")
        assert listed.status_code == 200
        assert [(r["id"], r["read"]) for r in listed.json()["results"]] == [(str(a.pk), False)]
        assert recipient_client.get(f"/api/v1/announcements/{a.pk}/").status_code == 200
        assert recipient_client.get("/api/v1/announcements/counts/").json() == {"read": 0, "unread": 1}
        assert_error(recipient_client.post(f"/api/v1/announcements/{a.pk}/read/"), 503, "unavailable")
        assert_error(operator_client.get(f"/api/v1/manage/announcements/{a.pk}/stats/"), 503, "unavailable")
        # Writes to PostgreSQL still succeed; the index catches up on the next change or read.
        response = operator_client.post(
            "/api/v1/manage/announcements/",
            {"title": "t", "body_html": "<p>b</p>", "platforms": ["user"]},
            format="json",
        )
        assert response.status_code == 201
    # Redis is back: the retried sync (here run by hand) brings the index up to date.
    from notices.tasks import platform_sync_task

    platform_sync_task.apply(("user", []))
    assert recipient_client.get("/api/v1/announcements/counts/").json() == {"read": 0, "unread": 2}


def test_failed_sync_schedules_a_retry() -> None:
    with (
        mock.patch("notices.readmodel.platform_sync", side_effect=RedisConnectionError("down")),
        mock.patch("notices.tasks.platform_sync_task.apply_async") as retry,
    ):
        a = announce(["user"])
    retry.assert_called_once_with(("user", []), countdown=5)
    assert a.pk


def test_rebuild_command_restores_the_indexes(redis: Any) -> None:
    a = announce(["user", "customer"])
    redis.flushdb()
    call_command("notices_rebuild", stdout=StringIO())
    assert redis.zscore(keys.notice_index("user", 0), a.pk) is not None
    assert redis.zscore(keys.notice_index("customer", 0), a.pk) is not None
