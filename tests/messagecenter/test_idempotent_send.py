"""Idempotent sends: the same key within 24 hours stores nothing new and answers
200 with the first message; another body under the key is 409; concurrent
duplicates make one message (PostgreSQL's unique index decides)."""

import threading
from typing import Any

import pytest
from django.db import connections

from messagecenter import services
from messagecenter.models import Message, MessageSendKey
from tests.conftest import assert_error, client_for
from tests.factories import SuperuserFactory

URL = "/api/v1/manage/messages/"


def _body(recipient: Any, **extra: Any) -> dict[str, Any]:
    return {"category": "system", "title": "Once", "body_html": "<p>b</p>", "to": {"users": [recipient.pk]}, **extra}


@pytest.mark.django_db(transaction=True)
def test_same_key_answers_the_first_message(operator_client: Any, recipient: Any, clock: Any) -> None:
    first = operator_client.post(URL, _body(recipient, idempotency_key="k-1"), format="json")
    assert first.status_code == 202, first.content
    again = operator_client.post(URL, _body(recipient, idempotency_key="k-1"), format="json")
    assert again.status_code == 200, again.content
    # The same message; its status is what it is now (delivered meanwhile).
    assert {k: v for k, v in again.json().items() if k != "status"} == {
        k: v for k, v in first.json().items() if k != "status"
    }
    assert set(again.json()) == {"id", "delivery", "recipients", "status", "send_at"}
    assert again.json()["status"] == Message.objects.get().status
    assert Message.objects.count() == 1
    # The header means the same, and an id sent as a string is the same body.
    body = _body(recipient)
    body["to"] = {"users": [str(recipient.pk)]}
    header = operator_client.post(URL, body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert header.status_code == 200
    assert header.json()["id"] == first.json()["id"]
    assert Message.objects.count() == 1
    # Another key sends again; no key always sends.
    assert operator_client.post(URL, _body(recipient, idempotency_key="k-2"), format="json").status_code == 202
    assert operator_client.post(URL, _body(recipient), format="json").status_code == 202
    assert operator_client.post(URL, _body(recipient), format="json").status_code == 202
    assert Message.objects.count() == 4


@pytest.mark.django_db(transaction=True)
def test_keys_are_global_across_operators(operator_client: Any, recipient: Any, clock: Any) -> None:
    first = operator_client.post(URL, _body(recipient, idempotency_key="shared"), format="json")
    other = client_for(SuperuserFactory(username="otto")).post(
        URL, _body(recipient, idempotency_key="shared"), format="json"
    )
    assert other.status_code == 200
    assert other.json()["id"] == first.json()["id"]


@pytest.mark.django_db(transaction=True)
def test_same_key_other_body_is_409_and_creates_nothing(operator_client: Any, recipient: Any, clock: Any) -> None:
    assert operator_client.post(URL, _body(recipient, idempotency_key="k"), format="json").status_code == 202
    response = operator_client.post(URL, _body(recipient, idempotency_key="k", title="Changed"), format="json")
    assert_error(response, 409, "idempotency_conflict")
    assert Message.objects.count() == 1
    assert MessageSendKey.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_bad_keys_are_400(operator_client: Any, recipient: Any, clock: Any) -> None:
    assert_error(operator_client.post(URL, _body(recipient, idempotency_key="x" * 201), format="json"), 400)
    assert_error(operator_client.post(URL, _body(recipient, idempotency_key=""), format="json"), 400)
    assert_error(operator_client.post(URL, _body(recipient, idempotency_key=7), format="json"), 400)
    response = operator_client.post(URL, _body(recipient, idempotency_key="a"), format="json", HTTP_IDEMPOTENCY_KEY="b")
    assert_error(response, 400)
    assert_error(operator_client.post(URL, _body(recipient), format="json", HTTP_IDEMPOTENCY_KEY="y" * 201), 400)
    assert Message.objects.count() == 0
    assert operator_client.post(URL, _body(recipient, idempotency_key="x" * 200), format="json").status_code == 202


@pytest.mark.django_db(transaction=True)
def test_a_key_older_than_a_day_may_be_reused(operator_client: Any, recipient: Any, clock: Any) -> None:
    first = operator_client.post(URL, _body(recipient, idempotency_key="daily"), format="json").json()
    clock.advance(hours=23, minutes=59)
    assert operator_client.post(URL, _body(recipient, idempotency_key="daily"), format="json").status_code == 200
    clock.advance(minutes=2)
    # Past the window even another body is accepted: the old key is forgotten.
    reuse = operator_client.post(URL, _body(recipient, idempotency_key="daily", title="Tomorrow"), format="json")
    assert reuse.status_code == 202
    assert reuse.json()["id"] != first["id"]
    assert Message.objects.count() == 2
    assert MessageSendKey.objects.get(key="daily").message_id == int(reuse.json()["id"])


@pytest.mark.django_db(transaction=True)
def test_old_keys_are_purged(recipient: Any, operator: Any, clock: Any) -> None:
    for key in ("a", "b"):
        services.message_send_once(
            key=key,
            fingerprint="f",
            send=lambda: services.message_send(
                sender=operator, category="system", title="t", body_html="b", user_ids=[recipient.pk]
            ),
        )
    clock.advance(hours=25)
    assert services.message_send_keys_purge() == 2
    assert MessageSendKey.objects.count() == 0
    assert Message.objects.count() == 2  # the messages stay


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicates_make_one_message(operator: Any, recipient: Any) -> None:
    barrier = threading.Barrier(2)
    answers: list[tuple[int, str]] = []
    errors: list[BaseException] = []

    def post() -> None:
        try:
            client = client_for(operator)
            barrier.wait(timeout=10)
            response = client.post(URL, _body(recipient, idempotency_key="race"), format="json")
            answers.append((response.status_code, response.json()["id"]))
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=post) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert sorted(code for code, _ in answers) == [200, 202]
    assert len({message_id for _, message_id in answers}) == 1
    assert Message.objects.count() == 1
