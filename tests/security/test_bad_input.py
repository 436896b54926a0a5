"""Bad input on every write endpoint: malformed or non-object JSON, wrong types
for every field, huge lists and strings, out-of-range ids, unknown fields,
oversize bodies, bytes that are not UTF-8 and wrong content types. The answer
is always the error envelope with a 4xx (never a 500) and nothing is written.
"""

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import override_settings
from pyroaring import BitMap
from rest_framework.test import APIClient

from accounts.tokens import token_issue
from audit.models import AuditEntry
from messagecenter.models import Bulletin, Message, Subscription, UserGroupMembership
from tests.conftest import assert_error, client_for
from tests.core.test_webhooks import PRIVATE_URLS
from tests.security.seed import LOOPBACK_HOOK, World, build_world, db_state, item_id, redis_state, warm_up

pytestmark = pytest.mark.django_db(transaction=True)

PG_INT_MAX = 2**31 - 1
PG_BIGINT_MAX = 2**63 - 1


@pytest.fixture
def world(db: None, settings: Any) -> World:
    # Webhook URLs here are on loopback (a closed port): allowed unless a test says otherwise.
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = True
    return build_world()


def _later(**delta: float) -> str:
    return (datetime.now(UTC) + timedelta(**delta)).isoformat()


@pytest.fixture
def operator_api(world: World) -> Any:
    return client_for(world.operator)


# A valid body of every JSON write endpoint; each bad-input test breaks one thing.
# The value of each field is its kind: what it must refuse depends on it.
STRING, TEXT, BOOL, INT, TIME, ID, USER_ID, IDS, USER_IDS, ITEM_IDS, STRINGS, CHOICE, OBJECT = (
    "string",
    "text",
    "bool",
    "int",
    "time",
    "id",
    "user id",
    "ids",
    "user ids",
    "item ids",
    "strings",
    "choice",
    "object",
)
ID_KINDS = (ID, USER_ID, IDS, USER_IDS)


class Endpoint:
    def __init__(
        self,
        method: str,
        path: Callable[[World], str],
        body: Callable[[World], dict[str, Any]],
        kinds: dict[str, str],
        *,
        client: str = "operator",
    ) -> None:
        self.method, self.path, self.body, self.kinds, self.client = method, path, body, kinds, client


ENDPOINTS: dict[str, Endpoint] = {
    "token": Endpoint(
        "post",
        lambda w: "/api/v1/auth/token/",
        lambda w: {"username": "alice", "password": "pass-1234"},
        {"username": STRING, "password": STRING},
        client="anon",
    ),
    "user platforms": Endpoint(
        "put",
        lambda w: f"/api/v1/manage/users/{w.mallory.pk}/platforms/",
        lambda w: {"platforms": ["customer"]},
        {"platforms": STRINGS},
    ),
    "group create": Endpoint(
        "post", lambda w: "/api/v1/manage/user-groups/", lambda w: {"name": "g2"}, {"name": STRING}
    ),
    "members add": Endpoint(
        "post",
        lambda w: f"/api/v1/manage/user-groups/{w.alice_group.pk}/members/",
        lambda w: {"user_ids": [w.mallory.pk]},
        {"user_ids": USER_IDS},
    ),
    "members remove": Endpoint(
        "delete",
        lambda w: f"/api/v1/manage/user-groups/{w.alice_group.pk}/members/",
        lambda w: {"user_ids": [w.alice.pk]},
        {"user_ids": USER_IDS},
    ),
    "announcement create": Endpoint(
        "post",
        lambda w: "/api/v1/manage/announcements/",
        lambda w: {
            "title": "T",
            "body_html": "<p>b</p>",
            "summary": "s",
            "platforms": ["user"],
            "publish_at": "2026-01-01T00:00:00Z",
            "expire_at": "2099-01-01T00:00:00Z",
            "pinned": True,
        },
        {
            "title": STRING,
            "body_html": TEXT,
            "summary": STRING,
            "platforms": STRINGS,
            "publish_at": TIME,
            "expire_at": TIME,
            "pinned": BOOL,
        },
    ),
    "announcement change": Endpoint(
        "patch",
        lambda w: f"/api/v1/manage/announcements/{w.public_announcement.pk}/",
        lambda w: {"title": "T2", "body_html": "<p>c</p>", "summary": "s", "platforms": ["user"], "pinned": False},
        {"title": STRING, "body_html": TEXT, "summary": STRING, "platforms": STRINGS, "pinned": BOOL},
    ),
    "bulletin create": Endpoint(
        "post",
        lambda w: "/api/v1/manage/bulletins/",
        lambda w: {
            "title": "B",
            "body_html": "<p>b</p>",
            "display_time": "2026-01-01T00:00:00Z",
            "expire_at": "2099-01-01T00:00:00Z",
            "user_groups": [w.alice_group.pk],
        },
        {"title": STRING, "body_html": TEXT, "display_time": TIME, "expire_at": TIME, "user_groups": IDS},
    ),
    "bulletin change": Endpoint(
        "patch",
        lambda w: f"/api/v1/manage/bulletins/{w.alice_bulletin.pk}/",
        lambda w: {"title": "B2", "body_html": "<p>c</p>", "user_groups": [w.alice_group.pk]},
        {"title": STRING, "body_html": TEXT, "display_time": TIME, "expire_at": TIME, "user_groups": IDS},
    ),
    "message send": Endpoint(
        "post",
        lambda w: "/api/v1/manage/messages/",
        lambda w: {
            "category": "system",
            "title": "M",
            "summary": "s",
            "body_html": "<p>m</p>",
            "link": "https://example.com/x",
            "images": ["https://example.com/a.png"],
            "to": {"users": [w.mallory.pk], "groups": [w.alice_group.pk], "everyone": False},
            "expire_at": "2099-01-01T00:00:00Z",
            "idempotency_key": "send-1",
        },
        {
            "category": CHOICE,
            "title": STRING,
            "summary": STRING,
            "body_html": TEXT,
            "link": STRING,
            "images": STRINGS,
            "to": OBJECT,
            "to.users": USER_IDS,
            "to.groups": IDS,
            "to.everyone": BOOL,
            "expire_at": TIME,
            "idempotency_key": STRING,
        },
    ),
    # The fields above are shared with the immediate send: only what scheduling adds.
    "message schedule": Endpoint(
        "post",
        lambda w: "/api/v1/manage/messages/",
        lambda w: {
            "category": "system",
            "title": "Later",
            "body_html": "<p>l</p>",
            "to": {"users": [w.mallory.pk]},
            "send_at": _later(hours=2),
        },
        {"send_at": TIME},
    ),
    "message change": Endpoint(
        "patch",
        lambda w: f"/api/v1/manage/messages/{w.scheduled_message.pk}/",
        lambda w: {
            "title": "Moved",
            "summary": "s",
            "body_html": "<p>m</p>",
            "to": {"users": [w.mallory.pk], "groups": [w.alice_group.pk], "everyone": False},
            "expire_at": "2099-01-01T00:00:00Z",
            "send_at": _later(hours=3),
        },
        {
            "title": STRING,
            "summary": STRING,
            "body_html": TEXT,
            "to": OBJECT,
            "to.users": USER_IDS,
            "to.groups": IDS,
            "to.everyone": BOOL,
            "expire_at": TIME,
            "send_at": TIME,
        },
    ),
    "message remind": Endpoint(
        "post",
        lambda w: f"/api/v1/manage/messages/{w.alice_message.pk}/remind/",
        lambda w: {"title": "Please read", "idempotency_key": "remind-1"},
        {"title": STRING, "idempotency_key": STRING},
    ),
    "bulletin remind": Endpoint(
        "post",
        lambda w: f"/api/v1/manage/bulletins/{w.alice_bulletin.pk}/remind/",
        lambda w: {"title": "Please read", "idempotency_key": "remind-2"},
        {"title": STRING, "idempotency_key": STRING},
    ),
    "message type create": Endpoint(
        "post",
        lambda w: "/api/v1/manage/message-types/",
        lambda w: {
            "code": "invoice",
            "name": "Invoices",
            "category": "transaction",
            "default_ttl_seconds": 60,
            "self_service": True,
        },
        {"code": STRING, "name": STRING, "category": CHOICE, "default_ttl_seconds": INT, "self_service": BOOL},
    ),
    "subscription create": Endpoint(
        "post",
        lambda w: "/api/v1/manage/subscriptions/",
        lambda w: {"message_type": "shipment", "scope": "warehouse-9", "user": w.mallory.pk},
        {"message_type": STRING, "scope": STRING, "user": USER_ID},
    ),
    "subscription create (group)": Endpoint(
        "post",
        lambda w: "/api/v1/manage/subscriptions/",
        lambda w: {"message_type": "shipment", "scope": "warehouse-9", "group": w.alice_group.pk},
        {"message_type": STRING, "scope": STRING, "group": ID},
    ),
    "notification send": Endpoint(
        "post",
        lambda w: "/api/v1/manage/notifications/",
        lambda w: {
            "message_type": "shipment",
            "scope": "warehouse-1",
            "title": "N",
            "body_html": "<p>n</p>",
            "ttl_seconds": 60,
        },
        {"message_type": STRING, "scope": STRING, "title": STRING, "body_html": TEXT, "ttl_seconds": INT},
    ),
    "notification schedule": Endpoint(
        "post",
        lambda w: "/api/v1/manage/notifications/",
        lambda w: {
            "message_type": "shipment",
            "scope": "warehouse-1",
            "title": "Later",
            "body_html": "<p>l</p>",
            "send_at": _later(hours=2),
        },
        {"send_at": TIME},
    ),
    "notification change": Endpoint(
        "patch",
        lambda w: f"/api/v1/manage/notifications/{w.scheduled_notification.pk}/",
        lambda w: {
            "title": "Moved",
            "body_html": "<p>m</p>",
            "scope": "warehouse-2",
            "ttl_seconds": 120,
            "send_at": _later(hours=3),
        },
        {"title": STRING, "body_html": TEXT, "scope": STRING, "ttl_seconds": INT, "send_at": TIME},
    ),
    "webhook create": Endpoint(
        "post",
        lambda w: "/api/v1/manage/webhooks/",
        lambda w: {"url": LOOPBACK_HOOK + "/2", "events": ["delivery.failed"], "description": "d", "active": True},
        {"url": STRING, "events": STRINGS, "description": STRING, "active": BOOL},
    ),
    "webhook change": Endpoint(
        "patch",
        lambda w: f"/api/v1/manage/webhooks/{w.webhook.pk}/",
        lambda w: {
            "url": LOOPBACK_HOOK + "/3",
            "events": ["delivery.failed", "message.read"],
            "description": "d2",
            "active": False,
        },
        {"url": STRING, "events": STRINGS, "description": STRING, "active": BOOL},
    ),
    "read all": Endpoint(
        "post",
        lambda w: "/api/v1/inbox/read-all/",
        lambda w: {"category": "system"},
        {"category": CHOICE},
        client="alice",
    ),
    "inbox bulk": Endpoint(
        "post",
        lambda w: "/api/v1/inbox/bulk/",
        lambda w: {"action": "archive", "ids": [item_id(w.alice_message), item_id(w.alice_bulletin)]},
        {"action": CHOICE, "ids": ITEM_IDS},
        client="alice",
    ),
    "inbox snooze": Endpoint(
        "post",
        lambda w: f"/api/v1/inbox/{item_id(w.alice_message)}/snooze/",
        lambda w: {"until": _later(hours=2)},
        {"until": TIME},
        client="alice",
    ),
    "my preferences": Endpoint(
        "put",
        lambda w: "/api/v1/me/preferences/",
        lambda w: {"muted_categories": ["promotion"], "muted_message_types": ["shipment"], "email_digest": "daily"},
        {"muted_categories": STRINGS, "muted_message_types": STRINGS, "email_digest": CHOICE},
        client="alice",
    ),
    "my subscription create": Endpoint(
        "post",
        lambda w: "/api/v1/me/subscriptions/",
        lambda w: {"message_type": "weather", "scope": "city-1"},
        {"message_type": STRING, "scope": STRING},
        client="alice",
    ),
}

# Ids that are not ids: every id input refuses them, whether sent alone or in a list.
MALFORMED_IDS: list[Any] = [
    "abc", "8.5", 8.5, 1.0, True, False, None, "", " ", " 8", "8 ", "08", "+8", "-1", -1, 0, "0", "1e3", "0x10",
    "٣", PG_BIGINT_MAX + 1, str(PG_BIGINT_MAX + 1), 2**70, [8], {"id": 8},
]  # fmt: skip
# Past the bound of user ids (a PostgreSQL integer, and 32-bit audience bitmaps).
MALFORMED_USER_IDS: list[Any] = [*MALFORMED_IDS, PG_INT_MAX + 1, str(PG_INT_MAX + 1)]
# Times outside 1970..2100, including years that overflow on the way to UTC.
OUT_OF_RANGE_TIMES = [
    "0001-01-01T00:00:00Z", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59Z", "9999-12-31T23:59:59-01:00",
    "1969-12-31T23:59:59Z", "2100-01-01T00:00:00Z", "1900-01-01", "2999-01-01T00:00:00",
]  # fmt: skip

NOT_TIMES: list[Any] = [
    True,
    1_700_000_000,
    ["2026-01-01T00:00:00Z"],
    {"nested": 1},
    "yesterday",
    "2026-13-45T99:00:00Z",
]

# Values of the wrong type for each kind of field.
WRONG: dict[str, list[Any]] = {
    STRING: [True, 123, 1.5, ["x"], {"nested": "x"}],
    TEXT: [True, 123, ["<p>x</p>"], {"nested": "<p>x</p>"}],
    BOOL: ["true", "yes", 1, 0, [True], {"nested": True}],
    INT: ["7", 7.5, True, [7], {"nested": 7}, -1, 0, PG_BIGINT_MAX + 1, 2**70],
    TIME: [*NOT_TIMES, *OUT_OF_RANGE_TIMES],
    ID: [value for value in MALFORMED_IDS if value is not None],  # null means "not this one" where allowed
    USER_ID: [value for value in MALFORMED_USER_IDS if value is not None],
    IDS: ["1", 1, None, {"nested": [1]}, *[[value] for value in MALFORMED_IDS]],
    USER_IDS: ["1", 1, None, {"nested": [1]}, *[[value] for value in MALFORMED_USER_IDS]],
    # Inbox item ids ("m12"): a lone id, or ids that are neither such strings nor positive integers.
    ITEM_IDS: [
        "m1",
        1,
        None,
        {"nested": ["m1"]},
        [None],
        [True],
        [1.5],
        [-1],
        [0],
        [""],
        ["m"],
        ["m-1"],
        [["m1"]],
        [{"id": "m1"}],
        [PG_BIGINT_MAX + 1],
    ],
    STRINGS: ["user", [1], [True], [["user"]], [{"nested": "user"}], {"nested": ["user"]}],
    CHOICE: [True, 1, ["system"], {"nested": "system"}, "no-such-choice"],
    OBJECT: ["users", [1], True, 1],
}


def _client(world: World, endpoint: Endpoint) -> Any:
    if endpoint.client == "anon":
        return APIClient()
    return client_for(world.alice if endpoint.client == "alice" else world.operator)


def _set(body: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    changed = {**body}
    if "." in dotted:
        outer, inner = dotted.split(".", 1)
        changed[outer] = {**changed[outer], inner: value}
    else:
        changed[dotted] = value
    return changed


class Attempts:
    """Sends bad requests to one endpoint and checks each is refused with the
    envelope and writes nothing (PostgreSQL rows and read-model keys)."""

    def __init__(self, world: World, redis: Any, name: str) -> None:
        self.world, self.redis, self.endpoint = world, redis, ENDPOINTS[name]
        self.client = _client(world, self.endpoint)
        self.path = self.endpoint.path(world)
        if self.endpoint.client != "anon":
            warm_up(self.client)
        self.before = (db_state(), redis_state(redis))

    def json(self, body: Any, label: Any, *, status: int = 400) -> dict[str, Any]:
        response = getattr(self.client, self.endpoint.method)(self.path, body, format="json")
        return self._refused(response, label, status)

    def raw(self, data: bytes | str, label: Any, *, content_type: str = "application/json", status: int = 400) -> Any:
        response = getattr(self.client, self.endpoint.method)(self.path, data=data, content_type=content_type)
        return self._refused(response, label, status)

    def _refused(self, response: Any, label: Any, status: int) -> dict[str, Any]:
        assert response.status_code == status, (label, response.status_code, response.content[:300])
        error = assert_error(response, status)
        assert (db_state(), redis_state(self.redis)) == self.before, label
        return error


@pytest.mark.parametrize("name", list(ENDPOINTS))
def test_the_valid_bodies_are_accepted(world: World, redis: Any, name: str) -> None:
    # The bad-input cases below change one thing of these bodies: they must be good.
    endpoint = ENDPOINTS[name]
    client = _client(world, endpoint)
    if endpoint.client != "anon":
        warm_up(client)
    before, audited = (db_state(), redis_state(redis)), AuditEntry.objects.count()
    response = getattr(client, endpoint.method)(endpoint.path(world), endpoint.body(world), format="json")
    assert response.status_code < 300, response.content
    # The "nothing changed" checks below would see this write (an audit entry for an operator's).
    if endpoint.client != "anon":
        assert (db_state(), redis_state(redis)) != before
    if endpoint.client == "operator":
        assert AuditEntry.objects.count() > audited


def _with_kinds(*kinds: str) -> list[str]:
    """The endpoints with at least one field of these kinds: a case parametrised
    over them always has something to send."""
    names = [name for name, endpoint in ENDPOINTS.items() if set(endpoint.kinds.values()) & set(kinds)]
    assert names, kinds
    return names


def _fields(endpoint: Endpoint, *kinds: str) -> list[str]:
    fields = [field for field, kind in endpoint.kinds.items() if kind in kinds]
    assert fields, (endpoint.path, kinds)  # never a loop over nothing
    return fields


def _get(body: dict[str, Any], dotted: str) -> Any:
    outer, _, inner = dotted.partition(".")
    return body[outer][inner] if inner else body[outer]


def _group_ids(queryset: Any) -> list[int]:
    return sorted(queryset.values_list("pk", flat=True))


# What each id field's request must have done, checked in PostgreSQL.
ID_EFFECTS: dict[tuple[str, str], Callable[[World, Any], None]] = {
    ("members add", "user_ids"): lambda w, r: _assert(
        UserGroupMembership.objects.filter(group=w.alice_group, user=w.mallory).exists()
    ),
    ("members remove", "user_ids"): lambda w, r: _assert(
        not UserGroupMembership.objects.filter(group=w.alice_group, user=w.alice).exists()
    ),
    ("bulletin create", "user_groups"): lambda w, r: _assert(
        _group_ids(Bulletin.objects.get(pk=r.json()["id"]).groups) == [w.alice_group.pk]
    ),
    ("bulletin change", "user_groups"): lambda w, r: _assert(
        _group_ids(Bulletin.objects.get(pk=w.alice_bulletin.pk).groups) == [w.alice_group.pk]
        and r.json()["user_groups"] == [str(w.alice_group.pk)]
    ),
    # Mallory named directly plus alice through her group: two recipients.
    ("message send", "to.users"): lambda w, r: _assert(r.json()["recipients"] == 2),
    ("message send", "to.groups"): lambda w, r: _assert(r.json()["recipients"] == 2),
    # The same audience on a scheduled message's edit.
    ("message change", "to.users"): lambda w, r: _scheduled_to_mallory_and_the_group(w, r),
    ("message change", "to.groups"): lambda w, r: _scheduled_to_mallory_and_the_group(w, r),
    ("subscription create", "user"): lambda w, r: _assert(
        Subscription.objects.get(pk=r.json()["id"]).user_id == w.mallory.pk and r.json()["user"] == str(w.mallory.pk)
    ),
    ("subscription create (group)", "group"): lambda w, r: _assert(
        Subscription.objects.get(pk=r.json()["id"]).group_id == w.alice_group.pk
    ),
}


def _assert(condition: bool) -> None:
    assert condition


def _scheduled_to_mallory_and_the_group(w: World, r: Any) -> None:
    message = Message.objects.get(pk=w.scheduled_message.pk)
    assert r.json()["recipients"] == 2  # mallory, and alice through the group
    assert _group_ids(message.groups) == [w.alice_group.pk]
    assert message.explicit_users == BitMap([w.mallory.pk])


ID_FIELDS = [(name, f) for name, e in ENDPOINTS.items() for f, kind in e.kinds.items() if kind in ID_KINDS]


def test_every_id_field_is_covered() -> None:
    assert set(ID_FIELDS) == set(ID_EFFECTS)


@pytest.mark.parametrize("form", [str, int], ids=["string", "integer"])
@pytest.mark.parametrize(("name", "field"), ID_FIELDS)
def test_ids_are_accepted_as_strings_and_integers(world: World, name: str, field: str, form: Any) -> None:
    # Ids come back as strings; a client sends them back as it got them (or as numbers).
    endpoint = ENDPOINTS[name]
    body = endpoint.body(world)
    value = _get(body, field)
    sent = [form(item) for item in value] if isinstance(value, list) else form(value)
    response = getattr(_client(world, endpoint), endpoint.method)(
        endpoint.path(world), _set(body, field, sent), format="json"
    )
    assert response.status_code < 300, response.content
    ID_EFFECTS[(name, field)](world, response)


@pytest.mark.parametrize("name", list(ENDPOINTS))
def test_wrong_types_and_nulls_are_400_naming_the_field(world: World, redis: Any, name: str) -> None:
    attempts = Attempts(world, redis, name)
    kinds = attempts.endpoint.kinds
    for field in _fields(attempts.endpoint, *WRONG):
        kind = kinds[field]
        assert WRONG[kind], kind
        for value in WRONG[kind]:
            body = _set(attempts.endpoint.body(world), field, value)
            error = attempts.json(body, (field, value))
            assert field.split(".")[0] in (error.get("fields") or {}), (field, value, error)
    for field in kinds:
        if (name, field) not in NULLABLE:
            error = attempts.json(_set(attempts.endpoint.body(world), field, None), (field, None))
            assert field.split(".")[0] in (error.get("fields") or {}), (field, error)
    for field in [f for f in kinds if (name, f) in NULLABLE]:  # writes: after every refusal
        body = _set(attempts.endpoint.body(world), field, None)
        if "idempotency_key" in body:
            body["idempotency_key"] = f"null-{field}"  # a new request, not a repeat of the last
        response = getattr(attempts.client, attempts.endpoint.method)(attempts.path, body, format="json")
        assert response.status_code < 300, (field, response.content)


@pytest.mark.parametrize("name", list(ENDPOINTS))
def test_unknown_fields_are_400_naming_them(world: World, redis: Any, name: str) -> None:
    attempts = Attempts(world, redis, name)
    error = attempts.json({**attempts.endpoint.body(world), "is_superuser": True, "id": 1}, "unknown")
    assert {"is_superuser", "id"} <= set(error["fields"]), error


LISTS = (IDS, USER_IDS, ITEM_IDS, STRINGS)


@pytest.mark.parametrize("name", _with_kinds(*LISTS))
def test_huge_lists_are_400(world: World, redis: Any, name: str) -> None:
    attempts = Attempts(world, redis, name)
    for field in _fields(attempts.endpoint, *LISTS):
        kind = attempts.endpoint.kinds[field]
        value: list[Any] = {
            STRINGS: ["user"] * 100_000,
            ITEM_IDS: [f"m{n}" for n in range(1, 100_001)],
        }.get(kind, list(range(1, 100_001)))
        error = attempts.json(_set(attempts.endpoint.body(world), field, value), field)
        assert field.split(".")[0] in error["fields"], error


# Fields where null is a value ("none", "no expiry", "not this one"): accepted.
# Null anywhere else is a 400 naming the field.
NULLABLE = {
    ("announcement create", "publish_at"),
    ("announcement create", "expire_at"),
    ("bulletin create", "expire_at"),
    ("bulletin change", "expire_at"),
    ("message send", "link"),
    ("message send", "expire_at"),
    ("message change", "expire_at"),
    ("notification send", "ttl_seconds"),
}


def test_every_nullable_field_is_a_field() -> None:
    assert all(field in ENDPOINTS[name].kinds for name, field in NULLABLE)


# Values that are of the right type but name nothing that exists, or a time
# outside the window a schedule allows: 400 naming the field, nothing written.
def _past(w: World) -> str:
    return _later(minutes=-1)


def _too_far(w: World) -> str:
    return _later(days=367)


UNKNOWN_VALUES: list[tuple[str, str, Any]] = [
    ("message schedule", "send_at", _past),
    ("message schedule", "send_at", _too_far),
    ("message change", "send_at", _past),
    ("message change", "send_at", _too_far),
    ("notification schedule", "send_at", _past),
    ("notification schedule", "send_at", _too_far),
    ("notification change", "send_at", _past),
    ("notification change", "send_at", _too_far),
    ("inbox snooze", "until", _past),
    ("inbox snooze", "until", _too_far),
    ("message change", "to.users", lambda w: [PG_INT_MAX]),
    ("message change", "to.groups", lambda w: [PG_INT_MAX]),
    ("message change", "expire_at", lambda w: _later(hours=1)),  # before send_at
    ("message send", "idempotency_key", lambda w: ""),
    ("message send", "idempotency_key", lambda w: "k" * 201),
    ("message remind", "idempotency_key", lambda w: "k" * 201),
    ("bulletin remind", "idempotency_key", lambda w: ""),
    ("inbox bulk", "action", lambda w: "explode"),
    ("inbox bulk", "ids", lambda w: []),
    ("inbox bulk", "ids", lambda w: [f"m{n}" for n in range(1, 102)]),
    ("my preferences", "muted_categories", lambda w: ["promotion", "no-such-category"]),
    ("my preferences", "muted_message_types", lambda w: ["shipment", "no-such-type"]),
    ("my preferences", "email_digest", lambda w: "hourly"),
    ("my subscription create", "message_type", lambda w: "no-such-type"),
    ("my subscription create", "scope", lambda w: ""),
    ("message type create", "self_service", lambda w: "true"),
    ("webhook create", "events", lambda w: ["message.exploded"]),
    ("webhook create", "events", lambda w: []),
    ("webhook change", "events", lambda w: ["delivery.failed", "message.exploded"]),
    ("webhook change", "events", lambda w: []),
    *[
        (name, "url", url)
        for name in ("webhook create", "webhook change")
        for url in ["ftp://127.0.0.1/hook", "file:///etc/passwd", "not a url", "http://user:pw@127.0.0.1:9/", ""]
    ],
]


@pytest.mark.parametrize("name", sorted({name for name, _, _ in UNKNOWN_VALUES}))
def test_values_naming_nothing_or_out_of_window_are_400(world: World, redis: Any, name: str) -> None:
    attempts = Attempts(world, redis, name)
    for _, field, value_of in [case for case in UNKNOWN_VALUES if case[0] == name]:
        value = value_of(world) if callable(value_of) else value_of
        error = attempts.json(_set(attempts.endpoint.body(world), field, value), (field, value))
        assert field.split(".")[0] in (error.get("fields") or {}), (field, value, error)


@pytest.mark.parametrize("name", ["webhook create", "webhook change"])
def test_webhook_urls_on_private_addresses_are_400(world: World, redis: Any, settings: Any, name: str) -> None:
    # Literal addresses: refused without any lookup or connection.
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    attempts = Attempts(world, redis, name)
    for url in [url for url in PRIVATE_URLS if "localhost" not in url]:
        error = attempts.json(_set(attempts.endpoint.body(world), "url", url), url)
        assert error["code"] == "invalid_url", (url, error)
        assert "url" in error["fields"], (url, error)


@pytest.mark.parametrize("name", _with_kinds(STRING, TEXT))
def test_huge_or_unstorable_strings_are_400(world: World, redis: Any, name: str) -> None:
    attempts = Attempts(world, redis, name)
    for field in _fields(attempts.endpoint, STRING, TEXT):
        for value in ["x" * 200_000, "nul\x00inside", "lone \ud800 surrogate", "\udfff"]:
            # json.dumps escapes the surrogates as JSON allows ("\\ud800"); the test
            # client could not encode them as UTF-8 bytes at all.
            body = json.dumps(_set(attempts.endpoint.body(world), field, value))
            error = attempts.raw(body, (field, value[:20]))
            if "\\ud" in body:
                assert error["code"] == "malformed_request", error  # refused by the parser, whatever the field
            else:
                assert field.split(".")[0] in error["fields"], error


# Bodies refused as a whole, whatever the endpoint's fields: each endpoint
# parses its own body (a view that reads it its own way shows up here), all
# cases in one test to build the world once.
def _malformed_json(attempts: Attempts) -> None:
    # (An empty body is no body: optional on read-all, a no-op PATCH.)
    deep = "[" * 100_000 + "]" * 100_000
    for raw in ['{"title": ', "{'single': 'quotes'}", '{"a": 1,}', "NaN", '{"a": NaN}', '{"a": 1}{"b": 2}', " ", deep]:
        error = attempts.raw(raw, raw[:30])
        assert error["code"] in {"malformed_request", "invalid"}, (raw, error)


def _json_that_is_not_an_object(attempts: Attempts) -> None:
    for raw in ["[]", '[{"title": "x"}]', '"text"', "42", "true", "null"]:
        attempts.raw(raw, raw)


def _bytes_that_are_not_utf8(attempts: Attempts) -> None:
    for raw in [b'{"title": "caf\xe9"}', b'{"name": "\xff\xfe\xfd"}', b"\xff\xfe{\x00}\x00", b'{"a": "\xed\xa0\x80"}']:
        attempts.raw(raw, raw)


def _wrong_content_types(attempts: Attempts) -> None:
    for content_type, data in [
        ("text/plain", '{"a": 1}'),
        ("application/x-www-form-urlencoded", "title=x&body_html=y"),
        (
            "multipart/form-data; boundary=xyz",
            '--xyz\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--xyz--\r\n',
        ),
        ("application/xml", "<a>1</a>"),
    ]:
        error = attempts.raw(data, content_type, content_type=content_type, status=415)
        assert error["code"] == "unsupported_media_type"


def _over_the_upload_limit(attempts: Attempts, world: World) -> None:
    body = _set(attempts.endpoint.body(world), next(iter(attempts.endpoint.kinds)), "x" * 5000)
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=4000):
        error = attempts.json(body, "oversize", status=413)
    assert error["code"] == "too_large"


@pytest.mark.parametrize("name", list(ENDPOINTS))
def test_bodies_that_are_no_json_object_are_400_415_or_413(world: World, redis: Any, name: str) -> None:
    attempts = Attempts(world, redis, name)
    _malformed_json(attempts)  # 400
    _json_that_is_not_an_object(attempts)  # 400
    _bytes_that_are_not_utf8(attempts)  # 400
    _wrong_content_types(attempts)  # 415
    _over_the_upload_limit(attempts, world)  # 413


# --- ids in paths and query parameters -------------------------------------------------------

BAD_INT_IDS = [
    "-1", "0", "00", "08", "1e3", "0x10", "1.0", "8.5", "abc", "true", "", "%20", "%208", "+8", "%D9%A3",
    str(PG_INT_MAX + 1), str(PG_BIGINT_MAX + 1), "9" * 40,
]  # fmt: skip
INT_ID_PATHS = [
    ("get", "/api/v1/announcements/{id}/", None),
    ("post", "/api/v1/announcements/{id}/read/", None),
    ("post", "/api/v1/announcements/{id}/unread/", None),
    ("put", "/api/v1/manage/users/{id}/platforms/", {"platforms": ["user"]}),
    ("post", "/api/v1/manage/user-groups/{id}/members/", {"user_ids": [1]}),
    ("delete", "/api/v1/manage/user-groups/{id}/members/", {"user_ids": [1]}),
    ("patch", "/api/v1/manage/announcements/{id}/", {"title": "x"}),
    ("delete", "/api/v1/manage/announcements/{id}/", None),
    ("get", "/api/v1/manage/announcements/{id}/stats/", None),
    ("patch", "/api/v1/manage/bulletins/{id}/", {"title": "x"}),
    ("delete", "/api/v1/manage/bulletins/{id}/", None),
    ("delete", "/api/v1/manage/messages/{id}/", None),
    ("delete", "/api/v1/manage/subscriptions/{id}/", None),
    ("patch", "/api/v1/manage/messages/{id}/", {"title": "x"}),
    ("post", "/api/v1/manage/messages/{id}/remind/", {}),
    ("post", "/api/v1/manage/bulletins/{id}/remind/", {}),
    ("patch", "/api/v1/manage/notifications/{id}/", {"title": "x"}),
    ("delete", "/api/v1/manage/notifications/{id}/", None),
    ("patch", "/api/v1/manage/webhooks/{id}/", {"description": "x"}),
    ("delete", "/api/v1/manage/webhooks/{id}/", None),
    ("delete", "/api/v1/me/subscriptions/{id}/", None),
    ("delete", "/api/v1/me/tokens/{id}/", None),
]


# Every id path with a real id, in the string form responses give it (bodies too).
def announcement_pk(w: World) -> int:
    return int(w.public_announcement.pk)


def bulletin_pk(w: World) -> int:
    return int(w.alice_bulletin.pk)


def group_pk(w: World) -> int:
    return int(w.alice_group.pk)


GOOD_ID_PATHS: list[tuple[str, str, str, Callable[[World], int], Callable[[World], Any] | None, int]] = [
    ("alice", "get", "/api/v1/announcements/{id}/", announcement_pk, None, 200),
    ("alice", "post", "/api/v1/announcements/{id}/read/", announcement_pk, None, 204),
    ("alice", "post", "/api/v1/announcements/{id}/unread/", announcement_pk, None, 204),
    ("operator", "put", "/api/v1/manage/users/{id}/platforms/", lambda w: w.mallory.pk,
     lambda w: {"platforms": ["user"]}, 200),
    ("operator", "post", "/api/v1/manage/user-groups/{id}/members/", group_pk,
     lambda w: {"user_ids": [str(w.mallory.pk)]}, 200),
    ("operator", "delete", "/api/v1/manage/user-groups/{id}/members/", group_pk,
     lambda w: {"user_ids": [str(w.alice.pk)]}, 200),
    ("operator", "patch", "/api/v1/manage/announcements/{id}/", announcement_pk, lambda w: {"title": "x"}, 200),
    ("operator", "delete", "/api/v1/manage/announcements/{id}/", announcement_pk, None, 204),
    ("operator", "get", "/api/v1/manage/announcements/{id}/stats/", announcement_pk, None, 200),
    ("operator", "patch", "/api/v1/manage/bulletins/{id}/", bulletin_pk, lambda w: {"title": "x"}, 200),
    ("operator", "delete", "/api/v1/manage/bulletins/{id}/", bulletin_pk, None, 204),
    ("operator", "delete", "/api/v1/manage/messages/{id}/", lambda w: w.alice_message.pk, None, 204),
    ("operator", "delete", "/api/v1/manage/subscriptions/{id}/", lambda w: w.alice_subscription.pk, None, 204),
    ("operator", "patch", "/api/v1/manage/messages/{id}/", lambda w: w.scheduled_message.pk, lambda w: {"title": "x"},
     200),
    ("operator", "post", "/api/v1/manage/messages/{id}/remind/", lambda w: w.alice_message.pk, lambda w: {}, 202),
    ("operator", "post", "/api/v1/manage/bulletins/{id}/remind/", bulletin_pk, lambda w: {}, 202),
    ("operator", "patch", "/api/v1/manage/notifications/{id}/", lambda w: w.scheduled_notification.pk,
     lambda w: {"title": "x"}, 200),
    ("operator", "delete", "/api/v1/manage/notifications/{id}/", lambda w: w.scheduled_notification.pk, None, 204),
    ("operator", "patch", "/api/v1/manage/webhooks/{id}/", lambda w: w.webhook.pk, lambda w: {"description": "x"},
     200),
    ("operator", "delete", "/api/v1/manage/webhooks/{id}/", lambda w: w.webhook.pk, None, 204),
    ("alice", "delete", "/api/v1/me/subscriptions/{id}/", lambda w: w.alice_subscription.pk, None, 204),
    ("alice", "delete", "/api/v1/me/tokens/{id}/", lambda w: token_issue(user=w.alice).row.pk, None, 204),
]  # fmt: skip


def test_every_id_path_has_a_good_case() -> None:
    assert {(m, t) for _, m, t, *_ in GOOD_ID_PATHS} == {(m, t) for m, t, _ in INT_ID_PATHS}


@pytest.mark.parametrize(("who", "method", "template", "pk", "body", "status"), GOOD_ID_PATHS)
def test_ids_in_paths_are_taken_in_the_form_responses_give(
    world: World,
    who: str,
    method: str,
    template: str,
    pk: Callable[[World], int],
    body: Callable[[World], Any] | None,
    status: int,
) -> None:
    client = client_for(getattr(world, who))
    kwargs = {"data": body(world), "format": "json"} if body is not None else {}
    response = getattr(client, method)(template.format(id=str(pk(world))), **kwargs)
    assert response.status_code == status, response.content


def _names_no_row(bad: str) -> bool:
    """An empty segment routes nowhere, and digits past every row's range are an
    id no row can have: both 404. Anything else was never an id: 400."""
    return bad == "" or (bad.isdigit() and not bad.startswith("0"))


@pytest.mark.parametrize(("method", "template", "body"), INT_ID_PATHS)
def test_bad_ids_in_paths_are_400_or_404(world: World, redis: Any, method: str, template: str, body: Any) -> None:
    client = client_for(world.operator)
    warm_up(client)
    before = (db_state(), redis_state(redis))
    for bad in BAD_INT_IDS:
        kwargs = {"data": body, "format": "json"} if body is not None else {}
        response = getattr(client, method)(template.format(id=bad), **kwargs)
        if _names_no_row(bad):
            assert_error(response, 404, "not_found")
        else:
            assert_error(response, 400, "invalid_id")
    assert (db_state(), redis_state(redis)) == before


BAD_ITEM_IDS = [
    "m-1", "m0", "m", "x1", "M1", "m1.0", "m 1", "m%00", "m%ff", "%ff%fe", "b" + "9" * 40, "n" + str(PG_BIGINT_MAX + 1),
    "m1%2F..", "..%2F..%2Fadmin", "m1;drop", "%E2%80%AE", "m%D9%A1",
]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "template", "body"),
    [
        ("get", "/api/v1/inbox/{id}/", None),
        ("delete", "/api/v1/inbox/{id}/", None),
        ("post", "/api/v1/inbox/{id}/read/", None),
        ("post", "/api/v1/inbox/{id}/unread/", None),
        ("post", "/api/v1/inbox/{id}/archive/", None),
        ("post", "/api/v1/inbox/{id}/unarchive/", None),
        ("post", "/api/v1/inbox/{id}/snooze/", lambda: {"until": _later(hours=1)}),
    ],
)
def test_bad_inbox_item_ids_are_404(
    world: World, redis: Any, method: str, template: str, body: Callable[[], Any] | None
) -> None:
    client = client_for(world.alice)
    warm_up(client)
    before = (db_state(), redis_state(redis))
    for bad in BAD_ITEM_IDS:
        kwargs = {"data": body(), "format": "json"} if body is not None else {}
        response = getattr(client, method)(template.format(id=bad), **kwargs)
        assert response.status_code == 404, (bad, response.content)
        assert_error(response, 404, "not_found")
    assert (db_state(), redis_state(redis)) == before


@pytest.mark.parametrize(
    "query",
    [
        "limit=0", "limit=-5", "limit=abc", "limit=1e3", "limit=%00",
        "cursor=garbage", "cursor=%00", "cursor=" + "A" * 5000, "cursor=%ff%fe",
        "since=yesterday", "since=%00", "since=2026-13-45T00:00:00Z", "since=" + "9" * 40,
        "since=0001-01-01T00:00:00Z", "since=0001-01-01T00:00:00%2B01:00", "since=9999-12-31T23:59:59Z",
        "since=9999-12-31T23:59:59-01:00", "since=1969-12-31T23:59:59Z", "since=2100-01-01T00:00:00Z",
        "unread=maybe", "unread=%00", "category=nope", "category=%00", "category=" + "x" * 5000,
    ],
)  # fmt: skip
@pytest.mark.parametrize("path", ["/api/v1/inbox/", "/api/v1/announcements/"])
def test_bad_query_parameters_are_400(world: World, path: str, query: str) -> None:
    key = query.split("=")[0]
    response = client_for(world.alice).get(f"{path}?{query}")
    if path == "/api/v1/announcements/" and key not in {"limit", "cursor"}:
        # Parameters the announcement list does not take are ignored.
        assert response.status_code == 200, response.content
        return
    error = assert_error(response, 400)
    assert key in (error.get("fields") or {}), error
