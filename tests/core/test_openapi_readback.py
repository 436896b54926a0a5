"""The OpenAPI document describes the operators' read-back and the audit log:
each GET has a summary, an example response, paging and its filters; message
sends state the idempotency key (body and header), 200 and 409."""

from typing import Any

import pytest
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

# path -> the query parameters its GET must state
LISTS = {
    "/api/v1/manage/announcements/": {"status", "platform", "pinned"},
    "/api/v1/manage/bulletins/": {"group", "status"},
    "/api/v1/manage/messages/": {"category", "status", "delivery", "group"},
    "/api/v1/manage/user-groups/": {"name"},
    "/api/v1/manage/message-types/": {"category"},
    "/api/v1/manage/subscriptions/": {"message_type", "scope", "user", "group"},
    "/api/v1/manage/notifications/": {"message_type", "scope", "category"},
    "/api/v1/manage/audit/": {"actor", "action", "object_type", "object_id"},
}
DETAILS = [
    "/api/v1/manage/announcements/{announcement_id}/",
    "/api/v1/manage/bulletins/{bulletin_id}/",
    "/api/v1/manage/messages/{message_id}/",
    "/api/v1/manage/user-groups/{group_id}/",
    "/api/v1/manage/message-types/{message_type_id}/",
    "/api/v1/manage/subscriptions/{subscription_id}/",
    "/api/v1/manage/notifications/{notification_id}/",
]


@pytest.fixture(scope="module")
def schema(django_db_blocker: Any) -> dict[str, Any]:
    with django_db_blocker.unblock():
        response = APIClient().get("/api/schema/?format=json")
    assert response.status_code == 200
    return dict(response.json())


def _get(schema: dict[str, Any], path: str) -> dict[str, Any]:
    assert path in schema["paths"], sorted(schema["paths"])
    return dict(schema["paths"][path]["get"])


def _example(op: dict[str, Any]) -> Any:
    content = op["responses"]["200"]["content"]["application/json"]
    assert content.get("examples"), op["operationId"]
    return next(iter(content["examples"].values()))["value"]


def test_every_list_is_described(schema: dict[str, Any]) -> None:
    for path, filters in LISTS.items():
        op = _get(schema, path)
        assert op.get("summary"), path
        names = {p["name"] for p in op.get("parameters", [])}
        assert {"limit", "cursor", "since", *filters} <= names, (path, names)
        assert set(_example(op)) == {"results", "next_cursor"}
        for code in ("400", "401", "403"):
            assert code in op["responses"], (path, code)


def test_every_detail_and_the_members_list_are_described(schema: dict[str, Any]) -> None:
    for path in DETAILS:
        op = _get(schema, path)
        assert op.get("summary"), path
        assert {"id", "created_at"} <= set(_example(op)), path
        assert "404" in op["responses"], path
    members = _get(schema, "/api/v1/manage/user-groups/{group_id}/members/")
    assert {"limit", "cursor"} <= {p["name"] for p in members["parameters"] if p["in"] == "query"}
    assert set(_example(members)["results"][0]) >= {"id", "username"}
    message = _example(_get(schema, "/api/v1/manage/messages/{message_id}/"))
    assert {"delivery", "recipients", "read_count", "send_at", "idempotency_key"} <= set(message)
    notification = _example(_get(schema, "/api/v1/manage/notifications/{notification_id}/"))
    assert {"send_at", "status", "recipients", "withdrawn"} <= set(notification)


def _read_schema(schema: dict[str, Any], path: str) -> dict[str, Any]:
    ref = _get(schema, path)["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    return dict(schema["components"]["schemas"][ref.rsplit("/", 1)[-1]])


def _enum(schema: dict[str, Any], prop: dict[str, Any]) -> set[str]:
    if "enum" in prop:
        return set(prop["enum"])
    (ref,) = [part["$ref"] for part in prop.get("allOf", [prop]) if "$ref" in part]
    return set(schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]["enum"])


def test_read_back_schemas_state_schedule_status_and_key(schema: dict[str, Any]) -> None:
    message = _read_schema(schema, "/api/v1/manage/messages/{message_id}/")["properties"]
    assert message["send_at"]["format"] == "date-time"
    assert message["send_at"].get("nullable") is True
    assert message["idempotency_key"]["type"] == "string"
    assert message["idempotency_key"].get("nullable") is True
    notification = _read_schema(schema, "/api/v1/manage/notifications/{notification_id}/")["properties"]
    assert notification["send_at"]["format"] == "date-time"
    assert notification["send_at"].get("nullable") is True
    assert _enum(schema, notification["status"]) == {"scheduled", "sent", "cancelled", "withdrawn"}
    # The list answers the same objects as the detail.
    page = _read_schema(schema, "/api/v1/manage/notifications/")["properties"]["results"]["items"]["$ref"]
    assert (
        page.rsplit("/", 1)[-1]
        == _get(schema, "/api/v1/manage/notifications/{notification_id}/")["responses"]["200"]["content"][
            "application/json"
        ]["schema"]["$ref"].rsplit("/", 1)[-1]
    )


def test_message_send_states_idempotency(schema: dict[str, Any]) -> None:
    op = schema["paths"]["/api/v1/manage/messages/"]["post"]
    assert {"200", "202", "409"} <= set(op["responses"])
    assert "Idempotency-Key" in {p["name"] for p in op["parameters"] if p["in"] == "header"}
    ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    key = schema["components"]["schemas"][ref]["properties"]["idempotency_key"]
    assert key["maxLength"] == 200


def test_the_malformed_id_fallback_is_not_an_operation(schema: dict[str, Any]) -> None:
    assert not [path for path in schema["paths"] if "{raw}" in path]
