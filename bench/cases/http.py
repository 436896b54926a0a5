"""The API over HTTP as many users meet it: 2,000 users in rotation (each
request authenticates as the next one), the production throttles on, WSGI
(gunicorn) and ASGI (uvicorn) side by side at the same worker count, each
endpoint next to the trivial DRF view on the same server, warm and cold.

Warm: after a pass over every user, ``seconds`` of load per endpoint, taken
in interleaved rounds (the ping view, then each endpoint, round after round,
gunicorn and uvicorn up side by side and taking turns on each);
an endpoint's figure is its median round, its failures those of every
round, so a burst of another process on the shared machine costs one round
of one endpoint rather than its row. Cold:
a fresh server (nothing held by its processes) and the users' read cache,
announcement count and authentication entries deleted from Redis, then each
user asked once; its latency next to the same pass over the ping view, two
passes each in mirrored order (ping, the endpoints, the endpoints again,
ping), pooled.
The mixed workload is 90% reads (inbox page, counts, announcements) and 10%
marks, every user in turn.
"""

import contextlib
import dataclasses
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.utils import timezone

from accounts import keys as account_keys
from accounts.tokens import token_digest
from bench import data, http_load
from bench.harness import Row
from bench.http_load import Step
from core.redis import get_redis
from messagecenter import keys as mc_keys
from messagecenter.services.bulletins import bulletin_create
from notices.models import Announcement

CASE = "HTTP"
USERS = 2_000
ITEMS = 50  # inbox items of every user (pushed to all of them)
ANNOUNCEMENTS = 20
BULLETINS = 5
SERVERS = (("wsgi", "gunicorn"), ("asgi", "uvicorn"))
PING = Step("GET", "/bench/ping")
INBOX = Step("GET", "/api/v1/inbox/")
COUNTS = Step("GET", "/api/v1/inbox/counts/")
ANNOUNCEMENT_LIST = Step("GET", "/api/v1/announcements/")
MARK = Step("POST", "/api/v1/inbox/{ref}/read/")
# 90% reads, 10% writes: what an open inbox page does while its user reads.
MIXED = (INBOX, COUNTS, INBOX, COUNTS, ANNOUNCEMENT_LIST, INBOX, COUNTS, INBOX, COUNTS, MARK)
# Each endpoint's floor: requests/s (warm) or median latency (cold) as a share of the ping view's.
TARGETS = {"inbox": 0.9, "counts": 0.95, "announcements": 0.9, "mark": 0.9, "mixed 90/10": 0.9}
ASGI_TARGET = 0.9  # uvicorn's requests/s as a share of gunicorn's, same endpoint, same worker count
WORKLOADS: tuple[tuple[str, tuple[Step, ...]], ...] = (
    ("inbox", (INBOX,)),
    ("counts", (COUNTS,)),
    ("announcements", (ANNOUNCEMENT_LIST,)),
    ("mark", (MARK,)),
    ("mixed 90/10", MIXED),
)
COLD = ("inbox", "counts", "announcements")
# Users of each cold pass: every one in a full run; --quick asks the first 500
# (a cold request costs several times a warm one: 2,000 of them take minutes).
QUICK_COLD_USERS = 500


def _prepare(users: int) -> tuple[list[int], list[str], list[str]]:
    """USERS users with tokens, each holding ITEMS items, the live
    announcements and bulletins; returns (user ids, tokens, item refs)."""
    data.ensure_users(max(users, USERS))
    User = get_user_model()
    operator, _ = User.objects.get_or_create(username="bench-operator", defaults={"is_staff": True})
    crowd = list(User.objects.filter(username__regex=r"^bench[0-9]+$").order_by("pk")[:USERS])
    by_user = data.issue_tokens(crowd)
    ids = [u.pk for u in crowd]
    data.reset_items()
    Announcement.objects.all().delete()
    get_redis().flushdb()
    refs = data.inbox_messages(operator=operator, audiences=[(ITEMS, ids)])
    now = timezone.now()
    data.live_announcements(operator=operator, count=ANNOUNCEMENTS, now=now)
    for i in range(BULLETINS):
        bulletin_create(
            title=f"Bulletin {i}", body_html="<p>b</p>", display_time=now - timedelta(minutes=i), actor=operator
        )
    return ids, [by_user[i] for i in ids], refs


def drop_caches(user_ids: list[int], tokens: list[str]) -> None:
    """Forget what the users' earlier requests left in Redis: the read cache
    (pages and counts), the token and user entries authentication reads, the
    platforms. Announcement counts keep no per-user cache: their counters are
    the read state itself."""
    pipe = get_redis().pipeline(transaction=False)
    for user_id, token in zip(user_ids, tokens, strict=True):
        pipe.delete(
            mc_keys.inbox_pages(user_id),
            account_keys.auth_token(token_digest(token)),
            account_keys.auth_user(user_id),
            account_keys.user_platforms(user_id),
        )
    pipe.execute()


def _ready(base: str, token: str) -> None:
    http_load.wait_ready(base, token)
    for step in (INBOX, COUNTS, ANNOUNCEMENT_LIST):
        status, body = http_load.get(f"{base}{step.path}", token)
        assert status == 200, (step.path, status, body)


def _serve(kind: str) -> Any:
    return http_load.serve(kind, env={"BENCH_THROTTLES": "true"})


def _warm(
    tokens: list[str], refs: list[str], seconds: int, rounds: int
) -> dict[str, dict[str, http_load.RotatingLoad]]:
    """Both servers up side by side, each warmed, then ``rounds`` rounds of
    every workload, the two servers taking turns on each (which goes first
    alternates from round to round): a drift of the shared machine (a vacuum,
    another process) falls on both sides of every ASGI/WSGI pair rather than
    on one server's whole series. An idle server costs the other nothing."""
    runs: dict[str, dict[str, list[http_load.RotatingLoad]]] = {kind: {} for kind, _ in SERVERS}
    with contextlib.ExitStack() as stack:
        bases: dict[str, str] = {}
        for kind, _ in SERVERS:
            bases[kind] = stack.enter_context(_serve(kind))
            _ready(bases[kind], tokens[0])
            # Reads of the mix first (on an idle machine every user several times): each process's
            # connections, caches and held answers.
            http_load.wrk_rotating(base=bases[kind], tokens=tokens, steps=MIXED[:5], seconds=max(5, seconds))
        each = max(1, round(seconds / rounds))
        for turn in range(rounds):
            order = list(bases) if turn % 2 == 0 else list(reversed(bases))
            for name, steps in (("ping", (PING,)), *WORKLOADS):
                for kind in order:
                    load = http_load.wrk_rotating(base=bases[kind], tokens=tokens, steps=steps, seconds=each, refs=refs)
                    runs[kind].setdefault(name, []).append(load)
    return {kind: {name: _median_round(loads) for name, loads in by_name.items()} for kind, by_name in runs.items()}


def _median_round(loads: list[http_load.RotatingLoad]) -> http_load.RotatingLoad:
    """The round of median requests/s, with the requests, failures and 429s of every round."""
    ranked = sorted(loads, key=lambda load: load.rps)
    middle = ranked[len(ranked) // 2]
    return dataclasses.replace(
        middle,
        requests=sum(load.requests for load in loads),
        non_2xx=sum(load.non_2xx for load in loads),
        errors=sum(load.errors for load in loads),
        throttled=sum(load.throttled for load in loads),
        bad=sum(load.bad for load in loads),
        rounds=tuple(load.rps for load in loads),
    )


def _cold(kind: str, user_ids: list[int], tokens: list[str]) -> dict[str, http_load.RotatingLoad]:
    """Two cold passes per endpoint over these users, each on a fresh server,
    in mirrored order (ping, inbox, counts, announcements, then back): a
    drift of the machine over the passes weighs on every endpoint alike. An
    endpoint's figures pool its two passes."""
    steps = (("ping", PING), ("inbox", INBOX), ("counts", COUNTS), ("announcements", ANNOUNCEMENT_LIST))
    passes: dict[str, list[http_load.RotatingLoad]] = {}
    for name, step in (*steps, *reversed(steps)):
        with _serve(kind) as base:
            _ready(base, tokens[0])
            drop_caches(user_ids, tokens)
            passes.setdefault(name, []).append(http_load.cold_pass(base=base, tokens=tokens, step=step))
    return {name: http_load.pooled(loads) for name, loads in passes.items()}


def _detail(load: http_load.RotatingLoad) -> str:
    text = (
        f"{load.requests:,} requests, p50 {load.p50 * 1e3:.2f} ms, p99 {load.p99 * 1e3:.2f} ms, "
        f"{load.throttled} throttled (429), {load.bad} other non-2xx, {load.errors} socket errors"
    )
    if len(load.rounds) > 1:
        text += f"; rounds {' · '.join(f'{rps:,.0f}/s' for rps in load.rounds)} (latencies: the median round's)"
    return text


def _failures(*loads: http_load.RotatingLoad) -> int:
    return sum(load.bad + load.errors for load in loads)


def run(*, users: int, quick: bool) -> list[Row]:
    seconds, rounds = (3, 1) if quick else (15, 5)
    user_ids, tokens, refs = _prepare(users)
    warm = _warm(tokens, refs, seconds, rounds)
    cold_users = QUICK_COLD_USERS if quick else len(tokens)
    cold = {kind: _cold(kind, user_ids[:cold_users], tokens[:cold_users]) for kind, _ in SERVERS}
    rows: list[Row] = []
    setting = (
        f"{len(tokens):,} users in rotation, {http_load.WORKERS} workers, wrk {http_load.CONNECTIONS} connections on "
        f"loopback (same 2 cores), production throttles"
    )
    for kind, server in SERVERS:
        ping = warm[kind]["ping"]
        rows.append(
            Row(
                f"{CASE} {server}",
                "GET /bench/ping requests/s, warm (the floor)",
                ping.rps,
                "/s",
                "-",
                None,
                better="higher",
                failures=_failures(ping),
                throttled=ping.throttled,
                note=f"{setting}, {seconds} s in {rounds} round(s): {_detail(ping)}",
            )
        )
        for name, steps in WORKLOADS:
            load = warm[kind][name]
            what = " + ".join(sorted({f"{s.method} {s.path}" for s in steps}))
            rows.append(
                Row(
                    f"{CASE} {server}",
                    f"{name} requests/s, warm",
                    load.rps,
                    "/s",
                    "GET /bench/ping, same server",
                    ping.rps,
                    better="higher",
                    target=TARGETS[name],
                    failures=_failures(load),
                    throttled=load.throttled,
                    note=f"{what}; {setting}, {seconds} s in {rounds} round(s): {_detail(load)}",
                )
            )
        floor = cold[kind]["ping"]
        for name in COLD:
            load = cold[kind][name]
            rows.append(
                Row(
                    f"{CASE} {server}",
                    f"{name} first request per user (cold), median latency",
                    load.p50,
                    "s",
                    "GET /bench/ping, cold pass, same server",
                    floor.p50,
                    p99=load.p99,
                    baseline_p99=floor.p99,
                    target=TARGETS[name],
                    failures=_failures(load),
                    throttled=load.throttled,
                    note=f"a fresh server, the users' cache entries deleted, each of {cold_users:,} users asked once "
                    f"per pass, two passes in mirrored order pooled ({http_load.CONNECTIONS} at a time, an asyncio "
                    f"httpx client): {_detail(load)}; ping's passes: {_detail(floor)}",
                )
            )
    for name in ("ping", *(name for name, _ in WORKLOADS)):
        asgi, wsgi = warm["asgi"][name], warm["wsgi"][name]
        rows.append(
            Row(
                f"{CASE} ASGI vs WSGI",
                f"{name} requests/s, warm, uvicorn vs gunicorn ({http_load.WORKERS} workers each)",
                asgi.rps,
                "/s",
                "the same on gunicorn",
                wsgi.rps,
                better="higher",
                target=ASGI_TARGET,
                failures=_failures(asgi),
                throttled=asgi.throttled,
            )
        )
    return rows
