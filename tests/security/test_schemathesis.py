"""schemathesis against the project's own OpenAPI document, in process.

Every operation of ``/api/schema/`` gets a handful of generated requests
(valid and invalid ones) from a superuser with a real token over a small
seeded world; no answer may be a 500 or break the documented status codes,
content types or response schemas. Bounded and derandomized, so CI is
deterministic and quick.
"""

from typing import Any

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.fixtures.clients import token_for
from tests.security.seed import World, build_world

pytestmark = pytest.mark.django_db(transaction=True)

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


# The document is the one the project serves, fetched through the WSGI app at
# collection time (schemathesis's lazy ``from_fixture`` loader does not run on
# pytest 9). The live stream holds its connection open for as long as the
# client listens (server-sent events), which a request/response fuzzer cannot
# read to the end; its auth and fallbacks are covered in tests/messagecenter/test_live.py.
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", WSGIHandler()).exclude(path="/api/v1/inbox/stream/")


@pytest.fixture
def world(db: None) -> World:
    return build_world()


SETTINGS = settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@schema.parametrize()
@SETTINGS
def test_api_conforms_to_its_schema(case: Any, world: World) -> None:
    # A superuser reaches every operation's success path. A token of its own
    # per example: one example may sign out (revoke the token it is sent with).
    token = token_for(world.operator)
    case.call_and_validate(headers={"Authorization": f"Token {token}"}, checks=CHECKS)


@schema.parametrize()
@SETTINGS
def test_api_conforms_to_its_schema_for_a_plain_user(case: Any, world: World) -> None:
    # A user on two platforms with items of every kind: the 403s of operator
    # endpoints and the 404s of others' items must be documented too.
    token = token_for(world.alice)
    case.call_and_validate(headers={"Authorization": f"Token {token}"}, checks=CHECKS)
