"""The audit log: one entry per operator write through the manage API and Django
admin, written in the write's own transaction; its list, filters, admin view
and CSV export."""

import csv
import io
import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from audit import services as core_services
from audit.models import AuditEntry
from core.api.errors import Conflict
from messagecenter import services
from messagecenter.apis import manage as manage_apis
from messagecenter.models import Bulletin, Message, UserGroup
from tests.conftest import assert_error, client_for
from tests.factories import StaffFactory
from tests.messagecenter.conftest import make_group, send

pytestmark = pytest.mark.django_db(transaction=True)


def _actions(object_type: str | None = None) -> list[tuple[str, str, str]]:
    rows = AuditEntry.objects.order_by("at", "id")
    if object_type:
        rows = rows.filter(object_type=object_type)
    return [(e.action, e.object_type, e.object_id) for e in rows]


@pytest.fixture
def admin_client(operator: Any) -> Client:
    client = Client()
    client.force_login(operator)
    return client


def test_api_writes_are_audited(operator: Any, operator_client: Any, recipient: Any, other_recipient: Any) -> None:
    group_id = operator_client.post("/api/v1/manage/user-groups/", {"name": "crew"}, format="json").json()["id"]
    members = f"/api/v1/manage/user-groups/{group_id}/members/"
    operator_client.post(members, {"user_ids": [recipient.pk, other_recipient.pk]}, format="json")
    operator_client.delete(members, {"user_ids": [other_recipient.pk]}, format="json")
    bulletin_id = operator_client.post(
        "/api/v1/manage/bulletins/",
        {"title": "B", "body_html": "b", "display_time": "2026-01-01T00:00:00Z", "user_groups": [group_id]},
        format="json",
    ).json()["id"]
    operator_client.patch(f"/api/v1/manage/bulletins/{bulletin_id}/", {"title": "B2"}, format="json")
    operator_client.delete(f"/api/v1/manage/bulletins/{bulletin_id}/")
    message_id = operator_client.post(
        "/api/v1/manage/messages/",
        {"category": "system", "title": "M", "body_html": "b", "to": {"users": [recipient.pk]}},
        format="json",
    ).json()["id"]
    operator_client.delete(f"/api/v1/manage/messages/{message_id}/")
    announcement_id = operator_client.post(
        "/api/v1/manage/announcements/", {"title": "A", "body_html": "b", "platforms": ["user"]}, format="json"
    ).json()["id"]
    operator_client.patch(f"/api/v1/manage/announcements/{announcement_id}/", {"pinned": True}, format="json")
    operator_client.delete(f"/api/v1/manage/announcements/{announcement_id}/")
    operator_client.post("/api/v1/manage/message-types/", {"code": "t", "name": "T"}, format="json")
    subscription_id = operator_client.post(
        "/api/v1/manage/subscriptions/", {"message_type": "t", "scope": "s", "user": recipient.pk}, format="json"
    ).json()["id"]
    notification_id = operator_client.post(
        "/api/v1/manage/notifications/",
        {"message_type": "t", "scope": "s", "title": "N", "body_html": "b"},
        format="json",
    ).json()["id"]
    operator_client.delete(f"/api/v1/manage/subscriptions/{subscription_id}/")
    operator_client.put(f"/api/v1/manage/users/{recipient.pk}/platforms/", {"platforms": ["customer"]}, format="json")

    type_id = str(AuditEntry.objects.get(object_type="messagecenter.messagetype").object_id)
    assert _actions() == [
        ("create", "messagecenter.usergroup", group_id),
        ("members_add", "messagecenter.usergroup", group_id),
        ("members_remove", "messagecenter.usergroup", group_id),
        ("create", "messagecenter.bulletin", bulletin_id),
        ("update", "messagecenter.bulletin", bulletin_id),
        ("delete", "messagecenter.bulletin", bulletin_id),
        ("create", "messagecenter.message", message_id),
        ("retract", "messagecenter.message", message_id),
        ("create", "notices.announcement", announcement_id),
        ("update", "notices.announcement", announcement_id),
        ("delete", "notices.announcement", announcement_id),
        ("create", "messagecenter.messagetype", type_id),
        ("create", "messagecenter.subscription", subscription_id),
        ("create", "messagecenter.notification", notification_id),
        ("delete", "messagecenter.subscription", subscription_id),
        ("platforms_set", "auth.user", str(recipient.pk)),
    ]
    entries = list(AuditEntry.objects.all())
    assert {e.actor_name for e in entries} == {operator.username}
    assert {e.source for e in entries} == {"api"}
    assert all(e.path.startswith("/api/v1/manage/") for e in entries)
    members_add = AuditEntry.objects.get(action="members_add")
    assert members_add.changes == {"user_ids": [recipient.pk, other_recipient.pk], "count": 2}
    update = AuditEntry.objects.get(action="update", object_type="messagecenter.bulletin")
    assert update.changes == {"title": "B2"}


def test_failed_writes_leave_no_entry(operator_client: Any) -> None:
    operator_client.post("/api/v1/manage/user-groups/", {"name": "dup"}, format="json")
    assert_error(operator_client.post("/api/v1/manage/user-groups/", {"name": "dup"}, format="json"), 400)
    assert_error(operator_client.post("/api/v1/manage/user-groups/", {}, format="json"), 400)
    assert _actions() == [("create", "messagecenter.usergroup", str(UserGroup.objects.get().pk))]


def test_entry_and_write_share_one_transaction(
    operator: Any, operator_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The entry fails to be written: the group the service created rolls back with it.
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("audit store down")

    monkeypatch.setattr(manage_apis, "audit_api", broken)
    with pytest.raises(RuntimeError):
        operator_client.post("/api/v1/manage/user-groups/", {"name": "ghost"}, format="json")
    assert not UserGroup.objects.filter(name="ghost").exists()
    monkeypatch.undo()

    # The write fails after its entry was written: the entry rolls back with it.
    bulletin = services.bulletin_create(
        title="B", body_html="b", display_time=timezone.now(), group_ids=[], actor=operator
    )

    def failing_delete(**kwargs: Any) -> None:
        Bulletin.objects.filter(pk=kwargs["bulletin"].pk).delete()
        raise Conflict("refused late")

    monkeypatch.setattr(manage_apis.services, "bulletin_delete", failing_delete)
    assert_error(operator_client.delete(f"/api/v1/manage/bulletins/{bulletin.pk}/"), 409)
    assert Bulletin.objects.filter(pk=bulletin.pk).exists()
    assert AuditEntry.objects.count() == 0


def test_audit_list_filters_and_paging(operator: Any, operator_client: Any, recipient: Any) -> None:
    viewer = StaffFactory(username="auditor")
    viewer.user_permissions.add(Permission.objects.get(codename="view_auditentry"))
    for name in ("a", "b", "c"):
        operator_client.post("/api/v1/manage/user-groups/", {"name": name}, format="json")
    group = UserGroup.objects.get(name="b")
    operator_client.post(f"/api/v1/manage/user-groups/{group.pk}/members/", {"user_ids": [recipient.pk]}, format="json")

    client = client_for(viewer)
    body = client.get("/api/v1/manage/audit/").json()
    assert [(r["action"], r["object_id"]) for r in body["results"]][:2] == [
        ("members_add", str(group.pk)),
        ("create", str(UserGroup.objects.get(name="c").pk)),
    ]
    first = body["results"][0]
    assert {"id", "actor", "action", "object_type", "object_id", "at"} <= set(first)
    assert first["actor"] == operator.username
    assert first["object_type"] == "messagecenter.usergroup"
    assert first["at"].endswith("+00:00")

    def actions(**params: Any) -> list[str]:
        response = client.get("/api/v1/manage/audit/", params)
        assert response.status_code == 200, response.content
        return [r["action"] for r in response.json()["results"]]

    assert actions(action="members_add") == ["members_add"]
    assert actions(actor=operator.username) == ["members_add", "create", "create", "create"]
    assert actions(actor="nobody") == []
    assert actions(object_type="messagecenter.usergroup", object_id=str(group.pk)) == ["members_add", "create"]
    since = AuditEntry.objects.get(action="members_add").at
    assert actions(since=(since - timedelta(microseconds=1)).isoformat()) == ["members_add"]

    seen, cursor = [], None
    while True:
        page = client.get("/api/v1/manage/audit/", {"limit": 1, **({"cursor": cursor} if cursor else {})}).json()
        seen += [r["id"] for r in page["results"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [str(e.pk) for e in AuditEntry.objects.order_by("-at", "-id")]
    assert_error(client.get("/api/v1/manage/audit/", {"limit": "0"}), 400)
    assert_error(client.get("/api/v1/manage/audit/", {"cursor": "nope"}), 400)
    assert_error(client.get("/api/v1/manage/audit/", {"since": "never"}), 400)


def test_admin_writes_are_audited(admin_client: Client, operator: Any, recipient: Any) -> None:
    inline = {
        "memberships-TOTAL_FORMS": "0",
        "memberships-INITIAL_FORMS": "0",
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "0",
    }
    response = admin_client.post(
        "/admin/messagecenter/usergroup/add/", {"name": "vip", "add_members": "alice", "remove_members": "", **inline}
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    group = UserGroup.objects.get(name="vip")
    response = admin_client.post(
        f"/admin/messagecenter/usergroup/{group.pk}/change/",
        {"name": "vip2", "add_members": "", "remove_members": "", **inline},
    )
    assert response.status_code == 302
    response = admin_client.post(f"/admin/messagecenter/usergroup/{group.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    others = [make_group("x"), make_group("y")]
    response = admin_client.post(
        "/admin/messagecenter/usergroup/",
        {"action": "delete_selected", "_selected_action": [g.pk for g in others], "post": "yes"},
    )
    assert response.status_code == 302
    message = send(operator, to={"users": [recipient]})
    response = admin_client.post(
        "/admin/messagecenter/message/", {"action": "retract", "_selected_action": [message.pk]}
    )
    assert response.status_code == 302

    actions = _actions()
    assert actions[:3] == [
        ("create", "messagecenter.usergroup", str(group.pk)),
        ("update", "messagecenter.usergroup", str(group.pk)),
        ("delete", "messagecenter.usergroup", str(group.pk)),
    ]
    assert set(actions[3:5]) == {("delete", "messagecenter.usergroup", str(g.pk)) for g in others}
    assert actions[5:] == [("retract", "messagecenter.message", str(message.pk))]
    entries = list(AuditEntry.objects.all())
    assert {e.source for e in entries} == {"admin"}
    assert {e.actor_name for e in entries} == {operator.username}
    assert AuditEntry.objects.filter(action="create").first().changes == {  # type: ignore[union-attr]
        "name": "vip",
        "add_members": [recipient.pk],
        "remove_members": [],
    }
    assert AuditEntry.objects.filter(action="update").get().changes == {"name": {"old": "vip", "new": "vip2"}}


def test_admin_compose_is_audited(admin_client: Client, recipient: Any) -> None:
    form = {
        "category": "system",
        "title": "Composed",
        "summary": "",
        "body_html": "<p>b</p>",
        "link": "",
        "image_urls": "",
        "users": str(recipient.pk),
        "everyone": "",
        "expire_at": "",
        "_send": "1",
    }
    response = admin_client.post("/admin/messagecenter/message/add/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    message = Message.objects.get()
    assert _actions() == [("create", "messagecenter.message", str(message.pk))]


def test_admin_entry_shares_the_transaction(admin_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    group = make_group("keep")

    def broken(**kwargs: Any) -> None:
        raise RuntimeError("audit store down")

    monkeypatch.setattr("audit.trail.audit_record", broken)
    with pytest.raises(RuntimeError):
        admin_client.post(
            "/admin/messagecenter/usergroup/",
            {"action": "delete_selected", "_selected_action": [group.pk], "post": "yes"},
        )
    assert UserGroup.objects.filter(pk=group.pk).exists()
    with pytest.raises(RuntimeError):
        admin_client.post(f"/admin/messagecenter/usergroup/{group.pk}/delete/", {"post": "yes"})
    assert UserGroup.objects.filter(pk=group.pk).exists()


def test_admin_audit_view_is_read_only_with_csv_export(admin_client: Client, operator: Any) -> None:
    make_group("crew")
    core_services.audit_record(
        actor=operator,
        action="create",
        object_type="messagecenter.usergroup",
        object_id=1,
        object_repr='=HYPERLINK("x")',
        changes={"name": "crew", "body": "x" * 5000},
    )
    entry = AuditEntry.objects.get()
    assert len(entry.changes["body"]) < 1100  # long values are cut
    assert admin_client.get("/admin/audit/auditentry/").status_code == 200
    assert admin_client.get("/admin/audit/auditentry/?action=create").status_code == 200
    assert admin_client.get(f"/admin/audit/auditentry/{entry.pk}/change/").status_code == 200  # a read-only view
    assert admin_client.get("/admin/audit/auditentry/add/").status_code == 403
    response = admin_client.post(f"/admin/audit/auditentry/{entry.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403
    assert AuditEntry.objects.filter(pk=entry.pk).exists()

    response = admin_client.post("/admin/audit/auditentry/", {"action": "export_csv", "_selected_action": [entry.pk]})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0][:6] == ["id", "at", "actor", "action", "object_type", "object_id"]
    assert rows[1][2:6] == [operator.username, "create", "messagecenter.usergroup", "1"]
    assert rows[1][6] == '\'=HYPERLINK("x")'  # a formula is not run by a spreadsheet
    assert len(rows) == 2


def test_audit_csv_export_endpoint(operator_client: Any, operator: Any, recipient: Any) -> None:
    for name in ("a", "b"):
        operator_client.post("/api/v1/manage/user-groups/", {"name": name}, format="json")
    group = UserGroup.objects.get(name="a")
    operator_client.post(f"/api/v1/manage/user-groups/{group.pk}/members/", {"user_ids": [recipient.pk]}, format="json")
    response = operator_client.get("/api/v1/manage/audit/export/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [(r["action"], r["object_id"]) for r in rows] == [
        ("members_add", str(group.pk)),
        ("create", str(UserGroup.objects.get(name="b").pk)),
        ("create", str(group.pk)),
    ]
    assert rows[0]["actor"] == operator.username
    assert json.loads(rows[0]["changes"]) == {"user_ids": [recipient.pk], "count": 1}
    filtered = operator_client.get("/api/v1/manage/audit/export/", {"action": "members_add"})
    assert len(list(csv.DictReader(io.StringIO(filtered.content.decode())))) == 1
    assert_error(operator_client.get("/api/v1/manage/audit/export/", {"since": "soon"}), 400)
