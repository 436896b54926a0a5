"""The served OpenAPI document states what the code enforces: 503 (and 429
where throttled) with the error envelope and ``Retry-After``, the bounds of
``limit``, ids and times, and the one spelling of an id in a path."""

import re
from typing import Any

import pytest
from django.conf import settings
from django.urls import resolve

from core.api.fields import ID_PATTERN, MAX_ROW_ID, MAX_USER_ID, IdConverter

pytestmark = pytest.mark.django_db

METHODS = {"get", "post", "put", "patch", "delete"}
ERROR_REF = "#/components/schemas/Error"
ID_FIELDS = {"user_ids", "users", "groups", "user_groups", "user", "group"}
USER_ID_FIELDS = {"user_ids", "users", "user"}


@pytest.fixture(scope="module")
def schema(django_db_blocker: Any) -> dict[str, Any]:
    from rest_framework.test import APIClient

    with django_db_blocker.unblock():
        response = APIClient().get("/api/schema/?format=json")
    assert response.status_code == 200
    return dict(response.json())


def _operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    found = [
        (path, method, op) for path, ops in schema["paths"].items() for method, op in ops.items() if method in METHODS
    ]
    assert len(found) > 20, found
    return found


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "1", path)


def test_every_operation_states_503_with_retry_after(schema: dict[str, Any]) -> None:
    for path, method, op in _operations(schema):
        answer = op["responses"].get("503")
        assert answer is not None, (method, path)
        assert "Retry-After" in answer["headers"], (method, path)
        ref = answer["content"]["application/json"]["schema"]["$ref"]
        # The health check keeps its own body; every other 503 is the envelope.
        assert ref == ("#/components/schemas/HealthDown" if path == "/healthz" else ERROR_REF), (method, path)


def test_429_is_stated_exactly_where_throttles_apply(schema: dict[str, Any]) -> None:
    throttled_seen = 0
    for path, method, op in _operations(schema):
        view = resolve(_concrete(path)).func.view_class  # type: ignore[attr-defined]
        throttled = bool(view().get_throttles())
        assert ("429" in op["responses"]) == throttled, (method, path)
        if throttled:
            throttled_seen += 1
            assert op["responses"]["429"]["content"]["application/json"]["schema"]["$ref"] == ERROR_REF
            assert "Retry-After" in op["responses"]["429"]["headers"]
    assert throttled_seen > 20


def test_the_error_envelope_schema(schema: dict[str, Any]) -> None:
    components = schema["components"]["schemas"]
    assert components["Error"]["required"] == ["error"]
    detail_ref = components["Error"]["properties"]["error"]["$ref"].rsplit("/", 1)[-1]
    assert set(components[detail_ref]["required"]) == {"code", "message"}


def test_limit_says_minimum_one_and_the_cap(schema: dict[str, Any]) -> None:
    limits = [prm for _, _, op in _operations(schema) for prm in op.get("parameters", []) if prm["name"] == "limit"]
    assert len(limits) >= 2
    cap = settings.MESSAGECENTER_MAX_PAGE_SIZE
    for prm in limits:
        assert prm["schema"] == {"type": "integer", "minimum": 1}
        assert f"capped at {cap}" in prm["description"]


def test_id_path_parameters_carry_the_converter_pattern(schema: dict[str, Any]) -> None:
    assert IdConverter.regex == ID_PATTERN
    seen = 0
    for path, method, op in _operations(schema):
        for prm in op.get("parameters", []):
            if prm["in"] == "path" and prm["name"] != "item_id":
                seen += 1
                assert prm["schema"]["pattern"] == f"^{ID_PATTERN}$", (method, path)
                pattern = re.compile(prm["schema"]["pattern"])
                assert pattern.match("8")
                assert not pattern.match("08")
                assert not pattern.match("8.5")
    assert seen >= 12


def _request_properties(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    found = []
    for name, component in schema["components"]["schemas"].items():
        if name.endswith("Request"):
            found += [(name, prop, spec) for prop, spec in component.get("properties", {}).items()]
    return found


def test_every_id_in_a_body_takes_both_forms_within_its_bound(schema: dict[str, Any]) -> None:
    seen = set()
    for component, prop, spec in _request_properties(schema):
        if prop not in ID_FIELDS:
            continue
        seen.add(prop)
        one = spec.get("items", spec)
        string, integer = one["oneOf"]
        assert string == {"type": "string", "pattern": f"^{ID_PATTERN}$"}, (component, prop)
        bound = MAX_USER_ID if prop in USER_ID_FIELDS else MAX_ROW_ID
        assert integer == {"type": "integer", "minimum": 1, "maximum": bound}, (component, prop)
    assert seen == ID_FIELDS


def test_every_time_input_states_its_range(schema: dict[str, Any]) -> None:
    times = [(c, p, s) for c, p, s in _request_properties(schema) if s.get("format") == "date-time"]
    assert {p for _, p, _ in times} >= {"publish_at", "expire_at", "display_time"}
    for component, prop, spec in times:
        assert "from 1970-01-01 up to 2100-01-01" in spec["description"], (component, prop)
    since = [prm for _, _, op in _operations(schema) for prm in op.get("parameters", []) if prm["name"] == "since"]
    assert since
    assert all("from 1970-01-01 up to 2100-01-01" in prm["description"] for prm in since)


def test_every_write_states_413(schema: dict[str, Any]) -> None:
    for path, method, op in _operations(schema):
        if method != "get":
            assert op["responses"]["413"]["content"]["application/json"]["schema"]["$ref"] == ERROR_REF, (method, path)
