"""Searching one inbox of 10,000 items (``GET /api/v1/inbox/?q=``): the
selector's first page for a text that matches nothing (the whole inbox is
read and matched: the worst case) and for a common one, next to PostgreSQL
matching the same rows (a row-per-recipient table, ``ILIKE`` on title and
summary) as the baseline."""

from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection

from bench.harness import Row, measure
from core.redis import get_redis
from messagecenter.readmodel import InboxEntry
from messagecenter.readmodel.publish import inbox_deliver, item_detail_put
from messagecenter.selectors import inbox_list

ITEMS = 10_000
# The first item's time (ms); one item a second after it.
START_MS = 1_795_000_000_000
WORDS = ("invoice", "delivery", "Straße", "促销活动", "password", "welcome")


def _fill(user_id: int) -> None:
    """10,000 items pushed into one inbox, each with its detail (title and summary)."""
    for i in range(ITEMS):
        word = WORDS[i % len(WORDS)]
        entry = InboxEntry(f"m{9_000_000 + i}", "system", 202611, i, START_MS + i * 1000)
        detail: dict[str, Any] = {
            "id": entry.ref,
            "kind": "message",
            "category": "system",
            "title": f"Your {word} number {i}",
            "summary": f"Item {i} about {word}, nothing else",
            "body_html": "<p>x</p>",
            "images": [],
            "link": None,
            "member": entry.member,
        }
        item_detail_put(ref=entry.ref, detail=detail)
        inbox_deliver(entry=entry, user_ids=[user_id], now_ms=START_MS + ITEMS * 1000)


def _baseline_table(user_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_search_baseline")
        cursor.execute(
            "CREATE TABLE bench_search_baseline (user_id int, item_id bigint, title text, summary text, "
            "created_at bigint)"
        )
        cursor.execute(
            "INSERT INTO bench_search_baseline SELECT %s, i, 'Your ' || w || ' number ' || i, "
            "'Item ' || i || ' about ' || w || ', nothing else', %s + i * 1000 "
            "FROM generate_series(0, %s) i, LATERAL (SELECT (ARRAY[%s, %s, %s, %s, %s, %s])[i %% 6 + 1] w) words",
            [user_id, START_MS, ITEMS - 1, *WORDS],
        )
        cursor.execute("CREATE INDEX ON bench_search_baseline (user_id, created_at DESC)")
        cursor.execute("ANALYZE bench_search_baseline")


def _baseline(user_id: int, text: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT item_id, title FROM bench_search_baseline WHERE user_id = %s AND "
            "(title ILIKE %s OR summary ILIKE %s) ORDER BY created_at DESC LIMIT 21",
            [user_id, f"%{text}%", f"%{text}%"],
        )
        cursor.fetchall()


def run(*, users: int, quick: bool) -> list[Row]:
    User = get_user_model()
    reader, _ = User.objects.get_or_create(username="bench-search-reader")
    get_redis().flushdb()
    _fill(int(reader.pk))
    _baseline_table(int(reader.pk))
    repeat = 15 if quick else 40
    rows: list[Row] = []
    for label, text, limit_ms in (
        ("no match (every item read and matched)", "no such words", 150),
        ("a common word (first page)", "STRASSE", 20),
    ):

        def search(text: str = text) -> Any:
            return inbox_list(user=reader, limit=20, query=text)

        search()  # warm: the details' parse cache, the months hint
        ours = measure(search, repeat=repeat, warmup=2)
        # A default argument binds the loop variable: mypy cannot infer such a lambda.
        base = measure(lambda text=text: _baseline(int(reader.pk), text), repeat=repeat, warmup=2)  # type: ignore[misc]
        rows.append(
            Row(
                "inbox search",
                f"q over a {ITEMS:,}-item inbox: {label}",
                ours.median,
                "s",
                "PostgreSQL ILIKE, row per recipient",
                base.median,
                p99=ours.p99,
                baseline_p99=base.p99,
                at_most=limit_ms / 1000,
                note="casefold match in Python over details read in growing HMGET batches",
            )
        )
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_search_baseline")
    return rows
