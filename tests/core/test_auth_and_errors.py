"""Token auth and the API's error envelope for every kind of error."""

from typing import Any

import pytest
from django.test import override_settings
from django.utils.dateparse import parse_datetime
from rest_framework.test import APIClient

from accounts.models import ApiToken
from accounts.tokens import token_digest
from tests.conftest import assert_error, client_for
from tests.factories import StaffFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_token_obtain_and_use(anon_client: Any) -> None:
    user = UserFactory(username="dora")
    response = anon_client.post("/api/v1/auth/token/", {"username": "dora", "password": "pass-1234"}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"token", "expires_at"}
    token = body["token"]
    # Only the token's digest is stored: the string itself is nowhere in the table.
    row = ApiToken.objects.get(user=user)
    assert row.digest == token_digest(token)
    assert parse_datetime(body["expires_at"]) == row.expires_at
    assert not any(token in str(value) for value in ApiToken.objects.values_list().get(pk=row.pk))
    # The same call again issues a new token; the first keeps working.
    again = anon_client.post("/api/v1/auth/token/", {"username": "dora", "password": "pass-1234"}, format="json")
    assert again.status_code == 200
    second = again.json()["token"]
    assert second != token
    assert set(ApiToken.objects.filter(user=user).values_list("digest", flat=True)) == {
        token_digest(token),
        token_digest(second),
    }
    for each in (token, second):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {each}")
        assert client.get("/api/v1/me/").json()["username"] == "dora"


def test_token_bad_credentials_is_400(anon_client: Any) -> None:
    UserFactory(username="dora")
    response = anon_client.post("/api/v1/auth/token/", {"username": "dora", "password": "nope"}, format="json")
    assert_error(response, 400, "invalid")


def test_token_missing_fields_names_them(anon_client: Any) -> None:
    error = assert_error(anon_client.post("/api/v1/auth/token/", {}, format="json"), 400, "invalid")
    assert set(error["fields"]) == {"username", "password"}


def test_malformed_json_is_400_envelope(anon_client: Any) -> None:
    response = anon_client.post("/api/v1/auth/token/", data="{not json", content_type="application/json")
    assert_error(response, 400, "malformed_request")


def test_no_credentials_is_401(anon_client: Any, recipient: Any) -> None:
    response = anon_client.put("/api/v1/manage/users/1/platforms/", {"platforms": ["user"]}, format="json")
    assert_error(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"].startswith("Token")


def test_bad_token_is_401(anon_client: Any) -> None:
    anon_client.credentials(HTTP_AUTHORIZATION="Token definitely-not-a-token")
    assert_error(anon_client.put("/api/v1/manage/users/1/platforms/", {}, format="json"), 401, "authentication_failed")


@pytest.mark.django_db(transaction=True)  # the deleted token leaves the auth cache after commit
def test_revoked_token_stops_working_at_once(recipient: Any) -> None:
    client = client_for(recipient)
    assert client.get("/api/v1/me/").status_code == 200  # authenticated (the sign-in view reads no token)
    ApiToken.objects.filter(user=recipient).delete()
    assert_error(client.put(f"/api/v1/manage/users/{recipient.pk}/platforms/", {}, format="json"), 401)


def test_non_operator_is_403(recipient_client: Any, recipient: Any) -> None:
    response = recipient_client.put(
        f"/api/v1/manage/users/{recipient.pk}/platforms/", {"platforms": ["customer"]}, format="json"
    )
    assert_error(response, 403, "permission_denied")


def test_staff_without_model_permission_is_403(recipient: Any) -> None:
    staff = StaffFactory(username="stan")
    response = client_for(staff).put(
        f"/api/v1/manage/users/{recipient.pk}/platforms/", {"platforms": ["customer"]}, format="json"
    )
    assert_error(response, 403, "permission_denied")


def test_unknown_api_path_is_404_envelope(recipient_client: Any) -> None:
    assert_error(recipient_client.get("/api/v1/no-such-thing/"), 404, "not_found")


def test_method_not_allowed_is_enveloped(anon_client: Any) -> None:
    assert_error(anon_client.get("/api/v1/auth/token/"), 405, "method_not_allowed")


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_oversize_body_is_413_envelope(anon_client: Any) -> None:
    body = '{"username": "' + "x" * 5000 + '", "password": "y"}'
    response = anon_client.post("/api/v1/auth/token/", data=body, content_type="application/json")
    assert_error(response, 413, "too_large")


def test_schema_and_docs_are_served(anon_client: Any) -> None:
    schema = anon_client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    document = schema.json()
    assert document["openapi"].startswith("3.")
    assert "/api/v1/auth/token/" in document["paths"]
    assert "/api/v1/manage/users/{user_id}/platforms/" in document["paths"]
    docs = anon_client.get("/api/docs/")
    assert docs.status_code == 200
    assert b"swagger" in docs.content.lower()
