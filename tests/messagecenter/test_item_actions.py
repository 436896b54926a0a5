"""Actions on an item: the create's ``actions``, the inbox's ``actions`` and
``response``, ``POST /inbox/{id}/respond/``, the operators' responses list,
the ``message.responded`` webhook event, and Redis agreeing with PostgreSQL."""

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from durability.rebuild import rebuild
from messagecenter import selectors, services
from messagecenter.fill import inbox_fill
from messagecenter.models import Message, MessageResponse
from messagecenter.readmodel import inbox as inbox_readmodel
from messagecenter.readmodel import responses as responses_rm
from messagecenter.readmodel import to_ms
from tests.conftest import assert_error, client_for, flush_redis, round_trips
from tests.messagecenter.conftest import send
from webhooks.models import WebhookDelivery, WebhookEndpoint

pytestmark = pytest.mark.django_db(transaction=True)

ACTIONS = [{"id": "approve", "label": "Approve"}, {"id": "decline", "label": "Decline"}]
_FIRST_PAGE: dict[str, Any] = {
    "category": None,
    "max_score": None,
    "skip": 0,
    "limit": 20,
    "unread_only": False,
    "since_ms": None,
}


def _create(client: Any, users: list[Any], **extra: Any) -> Any:
    body = {
        "category": "system",
        "title": "Leave request",
        "body_html": "<p>Two days</p>",
        "to": {"users": [u.pk for u in users]},
        **extra,
    }
    return client.post("/api/v1/manage/messages/", body, format="json")


def test_create_reads_back_actions(operator: Any, recipient: Any) -> None:
    op = client_for(operator)
    created = _create(op, [recipient], actions=ACTIONS)
    assert created.status_code == 202
    detail = op.get(f"/api/v1/manage/messages/{created.json()['id']}/").json()
    assert detail["actions"] == ACTIONS
    assert Message.objects.get(pk=created.json()["id"]).actions == ACTIONS
    # Without actions: an empty list.
    plain = _create(op, [recipient]).json()["id"]
    assert op.get(f"/api/v1/manage/messages/{plain}/").json()["actions"] == []


@pytest.mark.parametrize(
    "actions",
    [
        [],
        [{"id": f"a{i}", "label": "x"} for i in range(4)],
        [{"id": "same", "label": "One"}, {"id": "same", "label": "Two"}],
        [{"id": "not a slug", "label": "x"}],
        [{"id": "a" * 33, "label": "x"}],
        [{"id": "ok", "label": "x" * 41}],
        [{"id": "ok"}],
        [{"id": "ok", "label": "x", "extra": 1}],
        [{"id": 5, "label": "x"}],
        ["approve"],
        {"id": "ok", "label": "x"},
        "approve",
    ],
)
def test_bad_actions_are_400_and_store_nothing(operator: Any, recipient: Any, actions: Any) -> None:
    response = _create(client_for(operator), [recipient], actions=actions)
    assert_error(response, 400)
    assert "actions" in response.json()["error"]["fields"]
    assert not Message.objects.exists()


def test_inbox_items_carry_actions_and_response(operator: Any, recipient: Any) -> None:
    op, alice = client_for(operator), client_for(recipient)
    ref = "m" + _create(op, [recipient], actions=ACTIONS).json()["id"]
    plain = send(operator, to={"users": [recipient]}, title="No actions").ref
    listed = {item["id"]: item for item in alice.get("/api/v1/inbox/").json()["results"]}
    assert listed[ref]["actions"] == ACTIONS
    assert listed[ref]["response"] is None
    assert listed[plain]["actions"] == []
    assert listed[plain]["response"] is None
    detail = alice.get(f"/api/v1/inbox/{ref}/").json()
    assert (detail["actions"], detail["response"]) == (ACTIONS, None)


def test_respond_records_marks_read_and_shows_everywhere(operator: Any, recipient: Any, redis: Any) -> None:
    op, alice = client_for(operator), client_for(recipient)
    message_id = _create(op, [recipient], actions=ACTIONS).json()["id"]
    ref = f"m{message_id}"
    assert alice.get("/api/v1/inbox/").json()["results"][0]["read"] is False  # a first page in the read cache
    answered = alice.post(f"/api/v1/inbox/{ref}/respond/", {"action": "approve"}, format="json")
    assert answered.status_code == 200
    body = answered.json()
    assert body["action"] == "approve"
    assert body["at"].endswith("+00:00")
    # PostgreSQL first, then Redis.
    row = MessageResponse.objects.get()
    assert (row.message_id, row.user_id, row.action) == (int(message_id), recipient.pk, "approve")
    assert responses_rm.responses_get(user_id=recipient.pk, actions={ref: ACTIONS})[ref][0] == "approve"
    item = alice.get("/api/v1/inbox/").json()["results"][0]  # not the cached page of before
    assert item["response"] == {"action": "approve", "at": body["at"]}
    assert item["read"] is True
    assert alice.get(f"/api/v1/inbox/{ref}/").json()["response"] == {"action": "approve", "at": body["at"]}
    # The second answer is a conflict; the first stands.
    again = alice.post(f"/api/v1/inbox/{ref}/respond/", {"action": "decline"}, format="json")
    assert_error(again, 409)
    assert MessageResponse.objects.get().action == "approve"


def test_respond_bad_inputs(operator: Any, recipient: Any, outsider: Any) -> None:
    op, alice = client_for(operator), client_for(recipient)
    message_id = _create(op, [recipient], actions=ACTIONS).json()["id"]
    ref = f"m{message_id}"
    plain = send(operator, to={"users": [recipient]}).ref
    url = f"/api/v1/inbox/{ref}/respond/"
    assert_error(alice.post(url, {"action": "maybe"}, format="json"), 400, "unknown_action")
    assert_error(alice.post(url, {}, format="json"), 400)
    assert_error(alice.post(url, {"action": None}, format="json"), 400)
    assert_error(alice.post(url, {"action": ["approve"]}, format="json"), 400)
    assert_error(alice.post(url, {"action": "approve", "extra": 1}, format="json"), 400)
    assert_error(alice.post(f"/api/v1/inbox/{plain}/respond/", {"action": "approve"}, format="json"), 400, "no_actions")
    # Someone else's item, an absent one, a malformed one: 404 (never revealed).
    assert_error(client_for(outsider).post(url, {"action": "approve"}, format="json"), 404)
    assert_error(alice.post("/api/v1/inbox/m999999/respond/", {"action": "approve"}, format="json"), 404)
    assert_error(alice.post("/api/v1/inbox/zzz/respond/", {"action": "approve"}, format="json"), 404)
    assert not MessageResponse.objects.exists()
    # Without credentials: 401.
    from rest_framework.test import APIClient

    assert_error(APIClient().post(url, {"action": "approve"}, format="json"), 401)


def test_operators_list_responses_with_counts_and_paging(
    operator: Any, recipient: Any, other_recipient: Any, outsider: Any, clock: Any
) -> None:
    op = client_for(operator)
    message_id = _create(op, [recipient, other_recipient, outsider], actions=ACTIONS).json()["id"]
    for user, action in ((recipient, "approve"), (other_recipient, "decline"), (outsider, "approve")):
        clock.advance(seconds=1)
        assert (
            client_for(user)
            .post(f"/api/v1/inbox/m{message_id}/respond/", {"action": action}, format="json")
            .status_code
            == 200
        )
    url = f"/api/v1/manage/messages/{message_id}/responses/"
    first = op.get(url, {"limit": 2}).json()
    assert first["counts"] == {"approve": 2, "decline": 1}
    assert [r["user"]["username"] for r in first["results"]] == ["mallory", "bob"]
    assert first["results"][0] == {
        "user": {"id": str(outsider.pk), "username": "mallory"},
        "action": "approve",
        "at": first["results"][0]["at"],
    }
    rest = op.get(url, {"limit": 2, "cursor": first["next_cursor"]}).json()
    assert [r["user"]["username"] for r in rest["results"]] == ["alice"]
    assert rest["next_cursor"] is None
    # An unanswered message counts zeros; unknown and malformed ids; a garbled cursor.
    other = _create(op, [recipient], actions=ACTIONS).json()["id"]
    assert op.get(f"/api/v1/manage/messages/{other}/responses/").json() == {
        "counts": {"approve": 0, "decline": 0},
        "results": [],
        "next_cursor": None,
    }
    assert_error(op.get("/api/v1/manage/messages/999999/responses/"), 404)
    assert_error(op.get("/api/v1/manage/messages/abc/responses/"), 400)
    assert_error(op.get(url, {"cursor": "garbled"}), 400)
    assert_error(op.get(url, {"limit": 0}), 400)
    # Not an operator: 403.
    assert_error(client_for(recipient).get(url), 403)


def test_responded_webhook_event(operator: Any, recipient: Any) -> None:
    WebhookEndpoint.objects.create(
        url="https://hooks.example.com/x", events=["message.responded"], secret="whsec_" + "A" * 32
    )
    message_id = _create(client_for(operator), [recipient], actions=ACTIONS).json()["id"]
    client_for(recipient).post(f"/api/v1/inbox/m{message_id}/respond/", {"action": "decline"}, format="json")
    delivery = WebhookDelivery.objects.get()
    assert delivery.event == "message.responded"
    assert delivery.payload["data"] == {
        "message_id": str(message_id),
        "user_id": str(recipient.pk),
        "action": "decline",
    }


@pytest.mark.usefixtures("fill_on_read")
def test_responses_come_back_after_a_redis_loss(operator: Any, recipient: Any) -> None:
    message_id = _create(client_for(operator), [recipient], actions=ACTIONS).json()["id"]
    client_for(recipient).post(f"/api/v1/inbox/m{message_id}/respond/", {"action": "approve"}, format="json")
    flush_redis()
    rebuild()
    item = client_for(recipient).get(f"/api/v1/inbox/m{message_id}/").json()
    assert item["response"]["action"] == "approve"


@pytest.mark.parametrize("removal", ["retracted", "expired"])
def test_the_answer_to_a_removed_message_leaves_redis_and_stays_in_postgresql(
    operator: Any, recipient: Any, clock: Any, removal: str
) -> None:
    """A retracted or expired message is in no inbox: its answers leave the
    answerers' answer sets (a refill does not bring them back either),
    while the operator still reads them from PostgreSQL."""
    op = client_for(operator)
    expire_at = (clock.now + timedelta(minutes=5)).isoformat()
    gone = _create(op, [recipient], actions=ACTIONS, expire_at=expire_at).json()["id"]
    kept = _create(op, [recipient], actions=ACTIONS).json()["id"]
    alice = client_for(recipient)
    for message_id in (gone, kept):
        assert (
            alice.post(f"/api/v1/inbox/m{message_id}/respond/", {"action": "approve"}, format="json").status_code == 200
        )
    refs = [f"m{gone}", f"m{kept}"]
    assert set(responses_rm.responses_get(user_id=recipient.pk, actions=dict.fromkeys(refs, ACTIONS))) == set(refs)

    if removal == "retracted":
        assert op.delete(f"/api/v1/manage/messages/{gone}/").status_code == 204
    else:
        clock.advance(minutes=6)
        assert services.message_cleanup_expired() == 1
    assert set(responses_rm.responses_get(user_id=recipient.pk, actions=dict.fromkeys(refs, ACTIONS))) == {f"m{kept}"}
    inbox_fill(user_id=recipient.pk)
    assert set(responses_rm.responses_get(user_id=recipient.pk, actions=dict.fromkeys(refs, ACTIONS))) == {f"m{kept}"}
    assert MessageResponse.objects.filter(user=recipient).count() == 2
    assert op.get(f"/api/v1/manage/messages/{gone}/responses/").json()["counts"] == {"approve": 1, "decline": 0}


def test_admin_exports_responses_as_csv(operator: Any, recipient: Any, other_recipient: Any) -> None:
    from django.test import Client

    message_id = _create(client_for(operator), [recipient, other_recipient], actions=ACTIONS).json()["id"]
    client_for(recipient).post(f"/api/v1/inbox/m{message_id}/respond/", {"action": "approve"}, format="json")
    admin = Client()
    admin.force_login(operator)
    response = admin.post(
        "/admin/messagecenter/message/", {"action": "export_responses", "_selected_action": [message_id]}
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    lines = response.content.decode().strip().splitlines()
    assert lines[0] == "message_id,message_title,user_id,username,action,at"
    assert lines[1].startswith(f"{message_id},Leave request,{recipient.pk},alice,approve,")
    assert len(lines) == 2


def test_pages_answer_without_javascript_in_both_languages(operator: Any, recipient: Any) -> None:
    from django.test import Client

    message_id = _create(client_for(operator), [recipient], actions=ACTIONS).json()["id"]
    page = Client()
    page.force_login(recipient)
    detail = page.get(f"/inbox/m{message_id}/").content.decode()
    assert f'action="/inbox/m{message_id}/respond/"' in detail
    assert '<button type="submit" class="button" name="action" value="approve">Approve</button>' in detail
    listing = page.get("/inbox/").content.decode()
    assert 'name="action" value="decline">Decline</button>' in listing  # the row's buttons for readers without JS
    answered = page.post(f"/inbox/m{message_id}/respond/", {"action": "approve", "next": f"/inbox/m{message_id}/"})
    assert answered.status_code == 302
    assert answered["Location"] == f"/inbox/m{message_id}/"
    assert MessageResponse.objects.get().action == "approve"
    shown = page.get(f"/inbox/m{message_id}/").content.decode()
    assert "You answered: Approve" in shown
    assert 'name="action"' not in shown
    chinese = page.get(f"/inbox/m{message_id}/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "你的回复：Approve" in chinese  # noqa: RUF001 - the catalogue's full-width colon
    # A second answer through the page is refused and changes nothing.
    page.post(f"/inbox/m{message_id}/respond/", {"action": "decline"})
    assert MessageResponse.objects.get().action == "approve"
    assert page.post("/inbox/m999999/respond/", {"action": "approve"}).status_code == 404


def test_the_openapi_schema_describes_actions_responses_and_translations() -> None:
    from rest_framework.test import APIClient

    schema = APIClient().get("/api/schema/?format=json").json()
    paths, components = schema["paths"], schema["components"]["schemas"]
    respond = paths["/api/v1/inbox/{item_id}/respond/"]["post"]
    assert set(respond["responses"]) >= {"200", "400", "404", "409"}
    listed = paths["/api/v1/manage/messages/{message_id}/responses/"]["get"]
    assert set(listed["responses"]) >= {"200", "404"}
    page = components["ResponsesPage"]["properties"]
    assert set(page) == {"counts", "results", "next_cursor"}
    item = components["Item"]["properties"]
    assert {"actions", "response"} <= set(item)
    send = paths["/api/v1/manage/messages/"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    send_fields = components[send["$ref"].rsplit("/", 1)[-1]]["properties"]
    assert {"actions", "translations"} <= set(send_fields)
    for path in ("/api/v1/manage/notifications/", "/api/v1/manage/bulletins/", "/api/v1/manage/announcements/"):
        body = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert "translations" in components[body["$ref"].rsplit("/", 1)[-1]]["properties"], path


@pytest.mark.django_db(transaction=True)
@pytest.mark.not_on_cluster(reason="the one-round-trip page is a single-Redis path (a cluster plans every read)")
def test_a_page_reads_its_answers_with_the_page_and_every_path_agrees(operator: Any, recipient: Any) -> None:
    """The fast page's script reads the reader's answers with the rows: a page
    with actions is one round trip, like any page; the answers it shows are
    the ones a separate read of the hash and PostgreSQL give."""
    op, alice = client_for(operator), client_for(recipient)
    answered = "m" + _create(op, [recipient], actions=ACTIONS).json()["id"]
    waiting = "m" + _create(op, [recipient], actions=ACTIONS).json()["id"]
    plain = send(operator, to={"users": [recipient]}, title="No actions").ref
    assert alice.post(f"/api/v1/inbox/{answered}/respond/", {"action": "decline"}, format="json").status_code == 200
    # An answer the hash holds for a row without actions is never shown (as
    # PostgreSQL could hold none): the script does not even look it up.
    responses_rm.responses_put(user_id=recipient.pk, responses={plain: (0, 1_795_000_000_000)})
    selectors.inbox_list(user=recipient)  # the months hint: the next read takes the fast path
    with round_trips() as trips:
        page = selectors.inbox_list(user=recipient)
    assert trips[0] == 1
    shown = {item.id: item.response for item in page.results}
    at = MessageResponse.objects.get().at
    assert shown == {answered: {"action": "decline", "at": at.isoformat()}, waiting: None, plain: None}
    # The same rows' answers read apart (the other paths: one HMGET) and from PostgreSQL.
    read = inbox_readmodel.inbox_page(user_id=recipient.pk, now_ms=to_ms(timezone.now()), **_FIRST_PAGE)
    assert isinstance(read, inbox_readmodel.Page)
    assert read.responses_read
    rows = read.rows
    for responses_read, degraded in ((True, False), (False, False), (False, True)):
        items = selectors.grouped_items(
            user_id=recipient.pk, rows=rows, responses_read=responses_read, degraded=degraded
        )
        assert {item.id: item.response for item in items} == shown, (responses_read, degraded)
    assert {row.ref: row.response for row in rows} == {answered: ("decline", to_ms(at)), waiting: None, plain: None}
