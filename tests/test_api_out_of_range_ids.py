"""Ids beyond any database integer are a clear 404, never a 500 (PostgreSQL
raises "value out of range" for them if they reach a query)."""

from typing import Any

import pytest

from tests.conftest import client_for

pytestmark = pytest.mark.django_db

BIG = "99999999999999999999999"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", f"/api/v1/announcements/{BIG}/"),
        ("post", f"/api/v1/announcements/{BIG}/read/"),
        ("put", f"/api/v1/manage/users/{BIG}/platforms/"),
        ("patch", f"/api/v1/manage/announcements/{BIG}/"),
        ("get", f"/api/v1/manage/announcements/{BIG}/stats/"),
        ("delete", f"/api/v1/manage/bulletins/{BIG}/"),
        ("delete", f"/api/v1/manage/messages/{BIG}/"),
        ("post", f"/api/v1/manage/user-groups/{BIG}/members/"),
        ("get", f"/api/v1/inbox/m{BIG}/"),
        ("post", f"/api/v1/inbox/m{BIG}/read/"),
        ("delete", f"/api/v1/manage/subscriptions/{BIG}/"),
    ],
)
def test_out_of_range_ids_are_404(operator: Any, method: str, path: str) -> None:
    response = getattr(client_for(operator), method)(path, {"platforms": ["user"], "user_ids": [1]}, format="json")
    assert response.status_code == 404, response.content
    assert response.json()["error"]["code"] == "not_found"
