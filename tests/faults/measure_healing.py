"""Throwaway measurements (not committed): run with pytest -s on this file."""

import random
import statistics
import time
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings
from django.utils import timezone
from datetime import timedelta

from core import healing, journal, keys, outbox
from core.models import ReadModelState
from messagecenter import services as mc_services
from messagecenter.models import Message
from messagecenter.selectors import inbox_list
from messagecenter.services.snapshots import inbox_read_snapshot
from notices.services import announcement_mark_read, announcement_mark_unread
from notices.snapshots import announcement_read_snapshot
from core.services import user_set_platforms
from tests.faults.conftest import RedisServer
from tests.notices.conftest import announce

pytestmark = [pytest.mark.django_db, pytest.mark.redis_server]

N_USERS = 2000
N_MESSAGES = 20


def _world(operator: Any) -> tuple[list[Any], list[str], list[int]]:
    User = get_user_model()
    users = User.objects.bulk_create([User(username=f"u{i}") for i in range(N_USERS)])
    users = list(User.objects.filter(username__startswith="u").order_by("pk"))
    for u in users:
        user_set_platforms(user=u, platforms=["user"])
    refs = []
    for i in range(N_MESSAGES):
        sent = mc_services.message_send(
            sender=operator, category="system", title=f"m{i}", body_html="<p>m</p>", user_ids=[u.pk for u in users]
        )
        refs.append(Message.objects.get(pk=sent.pk).ref)
    anns = [announce(["user"], publish_at=timezone.now() - timedelta(hours=1)).pk for _ in range(5)]
    return users, refs, anns


def _latency(fn: Any, n: int) -> tuple[float, float]:
    times = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t)
    times.sort()
    return statistics.median(times) * 1e6, times[int(len(times) * 0.99)] * 1e6


def test_measure(redis_server: RedisServer, operator: Any) -> None:
    with override_settings(MESSAGECENTER_SELF_HEALING=True, MESSAGECENTER_JOURNAL_FLUSH_SECONDS=1.0):
        healing.forget()
        t = time.monotonic()
        users, refs, anns = _world(operator)
        print(f"\nworld: {N_USERS} users x {N_MESSAGES} push messages, 5 announcements in {time.monotonic() - t:.1f}s")
        r = healing.rebuild()
        print(f"first rebuild: {r.seconds:.2f}s steps={r.steps}")
        user = users[0]
        # --- mark latency ---------------------------------------------------------
        real_record = journal.record
        for label, on in (("before (no journal, no check)", False), ("after (journal + check)", True)):
            with override_settings(MESSAGECENTER_SELF_HEALING=on):
                journal.record = real_record if on else (lambda **kw: None)  # type: ignore[assignment]
                try:
                    for _ in range(2):  # warm, then measured
                        med, p99 = _latency(
                            lambda i: (mc_services.inbox_mark_read if i % 2 == 0 else mc_services.inbox_mark_unread)(
                                user=user, item_id=refs[0]
                            ),
                            2000,
                        )
                    amed, ap99 = _latency(
                        lambda i: (announcement_mark_read if i % 2 == 0 else announcement_mark_unread)(
                            user=user, announcement_id=anns[0]
                        ),
                        2000,
                    )
                finally:
                    journal.record = real_record  # type: ignore[assignment]
            print(f"mark latency {label}: inbox median {med:.0f} us p99 {p99:.0f} us; announcement median {amed:.0f} us p99 {ap99:.0f} us")
        journal.flush()
        # --- FLUSHALL experiment, before and after ----------------------------------------
        for label, on in (("before (no journal)", False), ("after (journal)", True)):
            inbox_read_snapshot()
            announcement_read_snapshot()
            journal.record = real_record if on else (lambda **kw: None)  # type: ignore[assignment]
            if not on:
                from core.models import MarkJournal

                MarkJournal.objects.all().delete()
            rng = random.Random(7)
            state: dict[tuple[int, str], bool] = {}
            started = time.monotonic()
            acked = 0
            while time.monotonic() - started < 3.0:
                u = rng.choice(users)
                ref = rng.choice(refs)
                read = rng.random() < 0.7
                (mc_services.inbox_mark_read if read else mc_services.inbox_mark_unread)(user=u, item_id=ref)
                state[(u.pk, ref)] = read
                acked += 1
            redis_server.client().flushall()
            flushed = time.monotonic()
            journal.record = real_record  # type: ignore[assignment]
            healing.forget()
            # the next read notices
            inbox_list(user=users[1])
            detected = time.monotonic() - flushed
            thread = healing.healer_thread()
            thread.join(120)
            healed = time.monotonic() - flushed
            row = ReadModelState.objects.get()
            lost = 0
            by_user: dict[int, dict[str, bool]] = {}
            for (uid, ref), read in state.items():
                if uid not in by_user:
                    page = inbox_list(user=get_user_model()(pk=uid), limit=100)
                    assert not page.degraded
                    by_user[uid] = {item.id: item.read for item in page.results}
                if by_user[uid].get(ref) != read:
                    lost += 1
            print(
                f"FLUSHALL {label}: {acked} marks acknowledged in 3 s on {len(state)} (user, item) pairs; "
                f"detected after {detected * 1000:.0f} ms (forced check), healed after {healed:.2f}s "
                f"(rebuild {row.last_seconds:.2f}s); pairs whose last mark was lost: {lost}"
            )
        # Detection without forcing: a poll loop like a client's.
        inbox_read_snapshot()
        redis_server.client().flushall()
        flushed = time.monotonic()
        while healing.check():
            inbox_list(user=users[2])
            time.sleep(0.01)
        print(f"detection by a polling process (1 s check interval): {(time.monotonic() - flushed) * 1000:.0f} ms")
        healing.healer_thread().join(120)
        journal.flush()
        healing.forget()
