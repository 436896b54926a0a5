"""Every Django admin write reaches the audit log in its own transaction: each
registered admin that can write is audited, custom views and actions included;
a save records the old and new values of the fields it changed, secrets masked
and long values cut."""

import json
from datetime import timedelta
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.contrib import admin
from django.contrib.auth.models import Group, Permission
from django.test import Client, RequestFactory
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError
from rest_framework.test import APIClient

from accounts.models import ApiToken
from accounts.tokens import token_issue
from audit.models import AuditEntry
from audit.services import AUDIT_MASK, audit_record
from audit.trail import AuditedAdminMixin
from durability.models import RedisCheckRun
from insight import admin as core_admin
from messagecenter.models import Bulletin
from tests.factories import UserFactory
from tests.messagecenter.conftest import make_group

pytestmark = pytest.mark.django_db(transaction=True)

# Registered admins that may skip the mixin: each must be read-only (checked below).
READ_ONLY_ADMINS = {
    # The log itself: viewed and exported as CSV, never added to, edited or deleted here.
    AuditEntry: "the audit log",
}


@pytest.fixture
def admin_client(operator: Any) -> Client:
    client = Client()
    client.force_login(operator)
    return client


def _entries(**filters: Any) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(**filters).order_by("at", "id"))


def test_every_admin_that_can_write_is_audited(operator: Any) -> None:
    request = RequestFactory().get("/admin/")
    request.user = operator
    unaudited = []
    for model, model_admin in admin.site._registry.items():
        if isinstance(model_admin, AuditedAdminMixin):
            continue
        if model not in READ_ONLY_ADMINS:
            unaudited.append(model._meta.label)
            continue
        # An allowed admin writes nothing: no add, change or delete (for a
        # superuser), actions that need only the view permission, no extra views.
        assert not model_admin.has_add_permission(request)
        assert not model_admin.has_change_permission(request)
        assert not model_admin.has_delete_permission(request)
        # django-stubs allow None among get_actions()' values; Django leaves such entries out.
        for func, name, _ in model_admin.get_actions(request).values():  # type: ignore[misc]
            assert set(getattr(func, "allowed_permissions", ())) == {"view"}, name
        default_urls = [p.name for p in admin.ModelAdmin.get_urls(model_admin)]
        assert [p.name for p in model_admin.get_urls()] == default_urls
    assert unaudited == []
    assert set(READ_ONLY_ADMINS) <= set(admin.site._registry)  # no stale allowance


def test_redis_check_run_view_is_audited(admin_client: Client, operator: Any) -> None:
    response = admin_client.post("/admin/durability/redischeckrun/run/", {"repair": "1"})
    assert response.status_code == 302
    assert RedisCheckRun.objects.get().repair is True  # the (eager) check ran
    [entry] = _entries()
    assert (entry.action, entry.object_type, entry.object_id) == ("check_redis", "durability.redischeckrun", "")
    assert (entry.source, entry.actor_name, entry.path) == (
        "admin",
        operator.username,
        "/admin/durability/redischeckrun/run/",
    )
    assert entry.changes == {"repair": True}


def test_redis_check_run_refused_by_the_broker_records_nothing(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(**kwargs: Any) -> None:
        raise BrokerError("broker down")

    monkeypatch.setattr(core_admin.check_redis_task, "delay", refuse)
    response = admin_client.post("/admin/durability/redischeckrun/run/", {"repair": "0"}, follow=True)
    assert "Could not queue the check: broker down" in response.content.decode()
    assert not AuditEntry.objects.exists()
    assert not RedisCheckRun.objects.exists()


def test_admin_change_records_old_and_new_values(admin_client: Client, recipient: Any) -> None:
    crew, vip = make_group("crew", recipient), make_group("vip")
    form = {"title": "Hello", "body_html": "<p>x</p>", "display_time_0": "2026-11-22", "display_time_1": "09:00:00"}
    response = admin_client.post("/admin/messagecenter/bulletin/add/", {**form, "groups": [crew.pk]})
    assert response.status_code == 302, response.content.decode()[:2000]
    bulletin = Bulletin.objects.get()
    long_body = "<p>" + "y" * 5000 + "</p>"
    response = admin_client.post(
        f"/admin/messagecenter/bulletin/{bulletin.pk}/change/",
        {**form, "title": "Hello again", "body_html": long_body, "groups": [vip.pk]},
    )
    assert response.status_code == 302, response.content.decode()[:2000]

    created, updated = _entries(object_type="messagecenter.bulletin")
    assert created.action == "create"
    assert created.changes["title"] == "Hello"
    assert created.changes["groups"] == [crew.pk]
    assert created.changes["display_time"] == "2026-11-22T09:00:00Z"
    assert updated.action == "update"
    assert set(updated.changes) == {"title", "body_html", "groups"}  # only what changed
    assert updated.changes["title"] == {"old": "Hello", "new": "Hello again"}
    assert updated.changes["groups"] == {"old": [crew.pk], "new": [vip.pk]}
    body = updated.changes["body_html"]
    assert body["old"] == "<p>x</p>"
    assert body["new"].startswith("<p>yyy")
    assert 1000 <= len(body["new"]) < 1100  # cut: the row keeps the whole body
    assert len(Bulletin.objects.get().body_html) > 5000


def test_admin_user_and_password_changes_are_masked(admin_client: Client) -> None:
    password = "Correct-Horse-9-battery"
    response = admin_client.post(
        "/admin/auth/user/add/",
        {"username": "carol", "usable_password": "true", "password1": password, "password2": password},
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    user = UserFactory._meta.model.objects.get(username="carol")
    new_password = "Another-Horse-7-staple"
    response = admin_client.post(
        f"/admin/auth/user/{user.pk}/password/",
        {"usable_password": "true", "password1": new_password, "password2": new_password},
    )
    assert response.status_code == 302, response.content.decode()[:3000]

    created, changed = _entries(object_type="auth.user", object_id=str(user.pk))
    assert created.action == "create"
    assert created.changes["username"] == "carol"
    assert created.changes["password1"] == created.changes["password2"] == AUDIT_MASK
    assert changed.action == "update"
    assert changed.changes == {"password": AUDIT_MASK}
    logged = json.dumps([created.changes, changed.changes])
    assert password not in logged
    assert new_password not in logged
    user.refresh_from_db()
    assert user.check_password(new_password)
    assert user.password not in logged  # not even the hash


def test_admin_group_permissions_are_audited(admin_client: Client) -> None:
    perm = Permission.objects.get(codename="change_bulletin")
    response = admin_client.post("/admin/auth/group/add/", {"name": "editors", "permissions": [perm.pk]})
    assert response.status_code == 302, response.content.decode()[:2000]
    group = Group.objects.get(name="editors")
    response = admin_client.post(f"/admin/auth/group/{group.pk}/change/", {"name": "editors", "permissions": []})
    assert response.status_code == 302
    created, updated = _entries(object_type="auth.group")
    assert created.changes == {"name": "editors", "permissions": [perm.pk]}
    assert updated.changes == {"permissions": {"old": [perm.pk], "new": []}}


def test_admin_token_delete_is_audited_and_tokens_are_never_added_or_changed(
    admin_client: Client, operator: Any, recipient: Any
) -> None:
    issued = token_issue(user=recipient)
    row = issued.row
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {issued.token}")
    assert api.get("/api/v1/me/").status_code == 200
    # Listed by user and times; neither the token nor its digest is shown anywhere.
    listing = admin_client.get("/admin/accounts/apitoken/")
    assert listing.status_code == 200
    page = listing.content.decode()
    for column in ("user", "created_at", "expires_at", "last_used_at"):
        assert f"column-{column}" in page, column
    assert recipient.username in page
    detail = admin_client.get(f"/admin/accounts/apitoken/{row.pk}/change/")  # a read-only view
    assert detail.status_code == 200
    for shown in (page, detail.content.decode()):
        assert issued.token not in shown
        assert row.digest not in shown
    # No add (a token is issued only to the user who signs in), no change.
    assert admin_client.get("/admin/accounts/apitoken/add/").status_code == 403
    assert admin_client.post("/admin/accounts/apitoken/add/", {"user": recipient.pk}).status_code == 403
    expires = {"expires_at_0": "2000-01-01", "expires_at_1": "00:00:00"}
    assert admin_client.post(f"/admin/accounts/apitoken/{row.pk}/change/", expires).status_code == 403
    assert list(ApiToken.objects.values_list("pk", "expires_at")) == [(row.pk, row.expires_at)]
    assert not _entries(object_type="accounts.apitoken")
    # Delete: audited, and the token stops working at once.
    response = admin_client.post(f"/admin/accounts/apitoken/{row.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not ApiToken.objects.exists()
    assert api.get("/api/v1/me/").status_code == 401
    entries = _entries(object_type="accounts.apitoken")
    assert [(e.action, e.object_id, e.source, e.actor_name) for e in entries] == [
        ("delete", str(row.pk), "admin", operator.username)
    ]
    assert entries[0].object_repr == str(row)
    logged = json.dumps([(e.object_id, e.object_repr, e.changes) for e in entries])
    assert issued.token not in logged
    assert row.digest not in logged


def test_secrets_are_masked_and_values_cleaned_for_every_source(operator: Any, recipient: Any) -> None:
    group = make_group("crew")
    entry = audit_record(
        actor=operator,
        action="update",
        object_type="webhooks.webhookendpoint",
        object_id=1,
        changes={
            "secret": "whsec_abc",
            "nested": {"api_token": "t0k", "password": {"old": "a", "new": "b"}, "note": "kept"},
            "idempotency_key": "kept-too",
            "group": group,
            "users": UserFactory._meta.model.objects.filter(pk=recipient.pk),
            "at": timezone.now().replace(microsecond=0),
        },
    )
    entry.refresh_from_db()
    assert entry.changes["secret"] == AUDIT_MASK
    assert entry.changes["nested"] == {"api_token": AUDIT_MASK, "password": AUDIT_MASK, "note": "kept"}
    assert entry.changes["idempotency_key"] == "kept-too"
    assert entry.changes["group"] == group.pk
    assert entry.changes["users"] == [recipient.pk]
    assert entry.changes["at"].endswith("Z")


def test_axes_clean_up_is_audited_once(admin_client: Client) -> None:
    attempt = AccessAttempt.objects.create(
        user_agent="x", ip_address="203.0.113.9", username="eve", http_accept="*/*", path_info="/", get_data="",
        post_data="", failures_since_start=3,
    )  # fmt: skip
    AccessAttempt.objects.filter(pk=attempt.pk).update(attempt_time=timezone.now() - timedelta(days=2))
    response = admin_client.post(
        "/admin/axes/accessattempt/", {"action": "cleanup_expired_attempts", "_selected_action": [attempt.pk]}
    )
    assert response.status_code == 302
    assert not AccessAttempt.objects.exists()
    [entry] = _entries()
    assert (entry.action, entry.object_type, entry.changes) == (
        "cleanup_expired_attempts",
        "axes.accessattempt",
        {"count": 1},
    )


def test_admin_entry_rolls_back_with_a_failed_action(admin_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    # The mixin wraps the action and its entries in one transaction: a failing
    # entry leaves the retried deliveries as they were (see test_webhook_admin).
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("audit store down")

    attempt = AccessAttempt.objects.create(
        user_agent="x", ip_address="203.0.113.9", username="eve", http_accept="*/*", path_info="/", get_data="",
        post_data="", failures_since_start=3,
    )  # fmt: skip
    monkeypatch.setattr("audit.trail.audit_record", broken)
    with pytest.raises(RuntimeError):
        admin_client.post(
            "/admin/axes/accessattempt/", {"action": "delete_selected", "_selected_action": [attempt.pk], "post": "yes"}
        )
    assert AccessAttempt.objects.filter(pk=attempt.pk).exists()
