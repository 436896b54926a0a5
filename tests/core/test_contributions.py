"""What the apps contribute to the layers below them, found through the app registry."""

from typing import Any

import pytest
from django.apps import apps

from core import contributions
from core.contributions import contributed, contributed_by_name, contributed_each, contributions_import
from core.demo import demo_seeds
from durability.drift import drift_checks
from insight.activity import reader_sources


def test_each_kind_lists_the_apps_contributions_in_installed_order() -> None:
    seeds = demo_seeds()
    assert [seed.__module__ for seed in seeds] == ["accounts.demo", "notices.demo", "messagecenter.demo"]
    assert [source.kind for source in reader_sources()] == ["announcement", "bulletin", "message"]
    areas = list(drift_checks())
    assert areas.index("announcements") < areas.index("subscribers")  # notices before messagecenter
    gauges = [state.name for state in contributed_each("gauges")]
    assert "messagecenter_webhook_pending" in gauges
    assert "messagecenter_pending_deliveries" in gauges


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="Unknown contribution"):
        contributed("nothing_like_this")


def test_a_path_that_does_not_import_fails_the_system_check(monkeypatch: Any) -> None:
    assert contributions_import() == []
    monkeypatch.setattr(apps.get_app_config("notices"), "demo_seed", "notices.demo.no_such_seed")
    (error,) = contributions_import()
    assert error.id == "core.E001"
    assert "notices: demo_seed = 'notices.demo.no_such_seed'" in error.msg


def test_mappings_merge_and_a_name_given_twice_is_refused(monkeypatch: Any) -> None:
    topics = contributed_by_name("outbox_handlers")
    assert {"notices.read", "notices.platform_sync", "messagecenter.mirror", "inbox.stale"} <= set(topics)
    twice = [{"a.topic": print}, {"a.topic": print}]
    monkeypatch.setattr(contributions, "contributed", lambda kind: twice)
    with pytest.raises(ValueError, match=r"'a\.topic' is contributed twice"):
        contributed_by_name.__wrapped__("outbox_handlers")
