"""``manage.py check_redis``: report, exit status, repair, recorded runs, the beat
task and the admin (index panel, run pages, "Run check now")."""

import json
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
import redis as redis_py
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone
from django.utils.html import escape
from redis.backoff import NoBackoff
from redis.retry import Retry

import core.redis
from core.redis import get_redis
from durability import drift
from durability.drift import DriftCheck, Finding, check_run
from durability.models import RedisCheckRun
from durability.tasks import check_redis_task
from messagecenter import keys as mc_keys
from messagecenter import services
from messagecenter.models import Subscription
from tests.conftest import flush_redis
from tests.factories import StaffFactory
from tests.messagecenter.conftest import make_group, send
from tests.notices.conftest import announce

pytestmark = pytest.mark.django_db(transaction=True)

AREAS = [
    "announcements",
    "deliveries",
    "bulletins",
    "item_details",
    "subscribers",
    "memberships",
]


@pytest.fixture(autouse=True)
def _no_grace(settings: Any) -> None:
    settings.MESSAGECENTER_CHECK_GRACE_SECONDS = 0
    settings.MESSAGECENTER_PUSH_THRESHOLD = 10


@pytest.fixture
def world(operator: Any, recipient: Any, other_recipient: Any) -> dict[str, Any]:
    """A little of everything the read model mirrors."""
    group = make_group("vip", recipient, other_recipient)
    announce(["user"])
    bulletin = services.bulletin_create(title="B", body_html="", display_time=timezone.now(), group_ids=[group.pk])
    message = send(operator, to={"users": [recipient, other_recipient]})
    hidden = send(operator, to={"users": [recipient]})
    services.inbox_hide(user=recipient, item_id=hidden.ref)
    services.message_type_create(code="stock", name="Stock", default_ttl_seconds=3600)
    services.subscription_create(message_type="stock", scope="WH1", group_id=group.pk)
    notification = services.notification_send(message_type="stock", scope="WH1", title="Low", body_html="")
    return {"group": group, "bulletin": bulletin, "message": message, "notification": notification}


def lose_a_subscriber(world: dict[str, Any]) -> tuple[str, str, str]:
    """Redis loses the group's subscription to the world's message type
    (PostgreSQL still has it): the subscribers check finds the set short of
    it. Returns the set's key, the member and the finding's detail."""
    subscription = Subscription.objects.get()
    key = mc_keys.subscribers(subscription.message_type_id, subscription.scope)
    get_redis().srem(key, subscription.subscriber)
    return key, subscription.subscriber, f"missing {subscription.subscriber}"


def change_a_detail(world: dict[str, Any]) -> None:
    """The message's stored-once detail in Redis says something PostgreSQL does not."""
    ref = world["message"].ref
    detail = json.loads(get_redis().hget(mc_keys.item_detail(), ref))
    get_redis().hset(mc_keys.item_detail(), ref, json.dumps({**detail, "title": "Not what was sent"}))


def run(*args: str) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("check_redis", *args, stdout=out, stderr=err)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_clean_project_reports_clean(world: Any) -> None:
    code, out, _ = run()
    assert code == 0
    assert out.splitlines() == [f"{area}: ok" for area in AREAS] + [
        f"Redis read model is clean (run #{RedisCheckRun.objects.get().pk})."
    ]
    recorded = RedisCheckRun.objects.get()
    assert (recorded.drift_count, recorded.repaired_count, recorded.findings, recorded.error) == (0, 0, [], "")
    assert recorded.finished_at is not None
    assert recorded.repair is False


def test_empty_project_is_clean(db: None) -> None:
    assert run()[0] == 0


def test_drift_reported_exit_1_then_repaired_then_clean(world: Any) -> None:
    key, _member, lost = lose_a_subscriber(world)
    change_a_detail(world)
    code, out, _ = run()
    assert code == 1
    assert "subscribers: 1 drifted" in out
    assert f"  - {key}: {lost}" in out
    assert f"  - {mc_keys.item_detail()} [{world['message'].ref}]: detail differs from PostgreSQL" in out
    assert "bulletins: ok" in out
    assert "2 drift remaining" in out
    assert "--repair" in out
    first = RedisCheckRun.objects.get()
    assert (first.drift_count, first.repaired_count) == (2, 0)
    assert {(f["area"], f["repaired"]) for f in first.findings} == {("subscribers", False), ("item_details", False)}

    code, out, _ = run("--repair")
    assert code == 0
    assert "subscribers: 1 drifted, 1 repaired, 0 remaining" in out
    assert "(repaired)" in out
    assert "2 drifted, all repaired" in out
    mended = RedisCheckRun.objects.order_by("-pk").first()
    assert mended is not None
    assert (mended.repair, mended.drift_count, mended.repaired_count) == (True, 2, 2)
    assert all(f["repaired"] for f in mended.findings)

    code, out, _ = run()
    assert code == 0
    assert "Redis read model is clean" in out


def test_flushed_redis_is_drift_everywhere_and_repair_restores_it(world: Any, recipient: Any) -> None:
    flush_redis()  # on a shared cluster: only this run's keys
    code, out, _ = run("--repair")
    assert code == 0, out
    drifted = {line.split(":")[0] for line in out.splitlines() if line.split(":")[0] in AREAS and "drifted" in line}
    assert drifted == {
        "announcements",
        "bulletins",
        "item_details",
        "subscribers",
        "memberships",  # healing is off here: every user counts as held
    }
    assert run()[0] == 0


def test_area_option_restricts_the_check(world: Any) -> None:
    lose_a_subscriber(world)
    code, out, _ = run("--area", "item_details", "--area", "bulletins")
    assert code == 0
    assert out.splitlines()[:2] == ["bulletins: ok", "item_details: ok"]
    assert run("--area", "subscribers")[0] == 1


def test_unknown_area_is_a_command_error(db: None) -> None:
    with pytest.raises(CommandError, match=r"Unknown area.*nope"):
        call_command("check_redis", "--area", "nope", stdout=StringIO())
    assert not RedisCheckRun.objects.exists()


def test_redis_down_exits_2_with_a_message_and_an_error_run(db: None, settings: Any) -> None:
    # Every read-model client comes from core.redis: aim it at a port nothing listens on.
    dead = redis_py.Redis(
        host="127.0.0.1", port=1, socket_connect_timeout=0.2, socket_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )
    settings.MESSAGECENTER_REDIS_CLUSTER_URL = ""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(core.redis, "get_redis_connection", lambda alias="default": dead)
        code, out, err = run("--repair")
    assert code == 2
    assert out == ""
    assert err.startswith("Redis unreachable: ")
    assert "Traceback" not in err
    failed = RedisCheckRun.objects.get()
    assert failed.error.startswith("Redis unreachable: ")
    assert failed.finished_at is not None
    assert (failed.drift_count, failed.findings) == (0, [])


def test_stored_findings_are_capped_but_all_counted(db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    findings = [Finding(area="many", key=f"k{i}", detail="gone") for i in range(250)]
    check = DriftCheck(area="many", description="test", find=lambda: findings, repair=lambda found: None)
    monkeypatch.setattr(drift, "drift_checks", lambda: {"many": check})
    result = check_run(repair=True)
    assert (result.drift_count, result.repaired_count, result.remaining_count) == (250, 0, 250)
    recorded = RedisCheckRun.objects.get()
    assert recorded.drift_count == 250
    assert len(recorded.findings) == drift.STORED_FINDINGS == 200
    assert recorded.findings[0] == {"area": "many", "key": "k0", "member": "", "detail": "gone", "repaired": False}


def test_a_failing_check_records_the_error_and_raises(db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> list[Finding]:
        raise ZeroDivisionError("boom")

    check = DriftCheck(area="broken", description="test", find=broken, repair=lambda found: None)
    monkeypatch.setattr(drift, "drift_checks", lambda: {"broken": check})
    with pytest.raises(ZeroDivisionError):
        check_run(repair=False)
    assert RedisCheckRun.objects.get().error == "Check failed: ZeroDivisionError: boom"


# --- the task ---------------------------------------------------------------------


def test_nothing_runs_the_check_periodically(settings: Any) -> None:
    """A projection whose process died is replayed from its record instead."""
    tasks = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "core.check_redis" not in tasks
    assert "core.outbox_replay" in tasks


def test_task_stores_a_run_and_repairs_when_asked(world: Any) -> None:
    lose_a_subscriber(world)
    outcome = check_redis_task.delay().get()
    assert (outcome["drift"], outcome["repaired"], outcome["error"]) == (1, 0, "")
    assert RedisCheckRun.objects.get(pk=outcome["run"]).repair is False
    outcome = check_redis_task.delay(repair=True).get()
    assert (outcome["drift"], outcome["repaired"]) == (1, 1)
    assert RedisCheckRun.objects.get(pk=outcome["run"]).repair is True
    assert check_redis_task.delay().get()["drift"] == 0
    assert RedisCheckRun.objects.count() == 3


# --- admin -----------------------------------------------------------------------


def admin_client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_admin_index_shows_the_last_result(operator: Any, recipient: Any, world: Any) -> None:
    client = admin_client(operator)
    assert "Never checked yet." in client.get("/admin/").content.decode()
    check_run(repair=False)
    page = client.get("/admin/").content.decode()
    latest = RedisCheckRun.objects.get()
    assert f'href="/admin/durability/redischeckrun/{latest.pk}/change/"' in page
    assert "redis-check-clean" in page
    assert "Messagecenter" in page or "messagecenter" in page  # the app list is still there
    lose_a_subscriber(world)
    change_a_detail(world)
    check_run(repair=True)
    page = client.get("/admin/").content.decode()
    assert "2 drift</strong> (2 repaired)" in page


def test_admin_index_panel_needs_the_view_permission(db: None) -> None:
    staff = StaffFactory()
    page = admin_client(staff).get("/admin/").content.decode()
    assert "redis-check-panel" not in page


def test_admin_run_page_renders_findings_as_a_table(operator: Any, world: Any) -> None:
    key, _member, lost = lose_a_subscriber(world)
    result = check_run(repair=False)
    client = admin_client(operator)
    listing = client.get("/admin/durability/redischeckrun/")
    assert listing.status_code == 200
    assert "Run check now" in listing.content.decode()
    detail = client.get(f"/admin/durability/redischeckrun/{result.run.pk}/change/")
    assert detail.status_code == 200
    body = detail.content.decode()
    assert '<table class="redis-check-findings">' in body
    assert f"<code>{key}</code>" in body
    assert escape(lost) in body
    assert client.get("/admin/durability/redischeckrun/add/").status_code == 403


def test_admin_run_now_posts_with_csrf_and_needs_permission(operator: Any, world: Any) -> None:
    key, member, _lost = lose_a_subscriber(world)
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.get("/admin/durability/redischeckrun/run/").status_code == 405
    assert client.post("/admin/durability/redischeckrun/run/", {"repair": "1"}).status_code == 403  # no CSRF token
    listing = client.get("/admin/durability/redischeckrun/")
    token = listing.cookies["csrftoken"].value
    response = client.post("/admin/durability/redischeckrun/run/", {"repair": "1", "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert response["Location"] == "/admin/durability/redischeckrun/"
    recorded = RedisCheckRun.objects.get()
    assert (recorded.repair, recorded.drift_count, recorded.repaired_count) == (True, 1, 1)
    assert get_redis().sismember(key, member)


def test_admin_run_now_refused_without_the_add_permission(db: None) -> None:
    viewer = StaffFactory()
    viewer.user_permissions.add(Permission.objects.get(codename="view_redischeckrun"))
    client = admin_client(viewer)
    listing = client.get("/admin/durability/redischeckrun/")
    assert listing.status_code == 200
    assert "Run check now" not in listing.content.decode()
    assert client.post("/admin/durability/redischeckrun/run/", {"repair": "0"}).status_code == 403
    assert not RedisCheckRun.objects.exists()
    viewer.user_permissions.add(Permission.objects.get(codename="add_redischeckrun"))
    viewer = type(viewer).objects.get(pk=viewer.pk)  # fresh permission cache
    client = admin_client(viewer)
    assert client.post("/admin/durability/redischeckrun/run/", {"repair": "0"}).status_code == 302
    assert RedisCheckRun.objects.get().repair is False


def test_old_runs_are_pruned_when_a_new_one_is_recorded(db: None) -> None:
    old = RedisCheckRun.objects.create(started_at=timezone.now() - drift.RUNS_KEPT - timedelta(days=1))
    recent = RedisCheckRun.objects.create(started_at=timezone.now() - timedelta(days=1))
    result = check_run(repair=False)
    assert set(RedisCheckRun.objects.values_list("pk", flat=True)) == {recent.pk, result.run.pk}
    assert not RedisCheckRun.objects.filter(pk=old.pk).exists()
