"""Richer items on the inbox's hot path: a first page (20 of 1,000 items,
through the selector and the API's rendering) whose items carry translations
in three languages, read by a Chinese reader, and one whose items carry
actions (half of them answered), each next to the plain page measured in the
same run. Translations ride in the item's one detail JSON and the language
is picked when rendering, so the first should cost about what the plain page
costs (target: within 1.2x). The answers are read by the page's own script
(the rows that offer actions, in the user's answers set) and shown as
parsed once, so the second is held to the same target and to the one round
trip of a plain page."""

from typing import Any

from django.contrib.auth import get_user_model

from bench.harness import RoundTrips, Row, Stats, measure
from core.redis import get_redis
from messagecenter.apis.inbox import render_page
from messagecenter.readmodel import InboxEntry
from messagecenter.readmodel.publish import inbox_deliver, item_detail_put
from messagecenter.readmodel.responses import responses_put
from messagecenter.selectors import inbox_list

ITEMS = 1_000
START_MS = 1_795_000_000_000
ACTIONS = [{"id": "approve", "label": "Approve"}, {"id": "decline", "label": "Decline"}]
# Three languages besides the original: what the detail holds does not
# depend on the project's languages (validation does, the read path does not).
LANGUAGES = ("zh-hans", "fr", "de")


def _fill(user_id: int, *, base: int, shape: str) -> None:
    for i in range(ITEMS):
        entry = InboxEntry(f"m{base + i}", "system", 202611, base + i, START_MS + i * 1000)
        detail: dict[str, Any] = {
            "id": entry.ref,
            "kind": "message",
            "category": "system",
            "title": f"Order {i} shipped",
            "summary": f"Your parcel {i} leaves the warehouse today",
            "body_html": "<p>Tracking inside.</p>",
            "images": [],
            "link": None,
            "member": entry.member,
            "sender": "Operations",
        }
        if shape == "translated":
            detail["translations"] = {
                code: {"title": f"[{code}] Order {i} shipped", "summary": f"[{code}] parcel {i} leaves today"}
                for code in LANGUAGES
            }
        if shape == "actions":
            detail["actions"] = ACTIONS
        item_detail_put(ref=entry.ref, detail=detail)
        inbox_deliver(entry=entry, user_ids=[user_id], now_ms=START_MS + ITEMS * 1000)
    if shape == "actions":
        answered = {f"m{base + i}": (0, START_MS + i * 1000) for i in range(0, ITEMS, 2)}  # "approve"
        responses_put(user_id=user_id, responses=answered)


def run(*, users: int, quick: bool) -> list[Row]:
    User = get_user_model()
    get_redis().flushdb()
    readers = {}
    for n, shape in enumerate(("plain", "translated", "actions")):
        reader, _ = User.objects.get_or_create(username=f"bench-items-{shape}")
        _fill(int(reader.pk), base=8_000_000 + n * ITEMS, shape=shape)
        readers[shape] = reader
    repeat = 200 if quick else 1000

    def page(shape: str, language: str | None) -> Any:
        reader = readers[shape]
        return lambda: render_page(inbox_list(user=reader, limit=20, language=language))

    shapes = (("plain", "zh-hans"), ("translated", "zh-hans"), ("actions", None))
    calls = {shape: page(shape, language) for shape, language in shapes}
    for fn in calls.values():
        fn()  # warm: the months hint, the details' parse cache
    with RoundTrips(get_redis()) as trips:
        for _ in range(10):
            calls["actions"]()
    # Interleaved rounds: a shared machine's load drifts, and each page sees the same drift.
    samples: dict[str, list[float]] = {shape: [] for shape in calls}
    rounds = 10
    for _ in range(rounds):
        for shape, fn in calls.items():
            samples[shape] += measure(fn, repeat=repeat // rounds, warmup=5).samples
    timings = {shape: Stats(values) for shape, values in samples.items()}
    plain = timings["plain"]
    return [
        Row(
            "inbox items",
            "first page of 20 (of 1,000), every item in 3 languages, a Chinese reader",
            timings["translated"].median,
            "s",
            "the same page without translations (same run)",
            plain.median,
            p99=timings["translated"].p99,
            baseline_p99=plain.p99,
            target=1 / 1.2,
            note="translations in the detail JSON, the language picked when rendered",
        ),
        Row(
            "inbox items",
            "first page of 20 (of 1,000), every item with 2 actions, half answered",
            timings["actions"].median,
            "s",
            "the same page without actions (same run)",
            plain.median,
            p99=timings["actions"].p99,
            baseline_p99=plain.p99,
            target=1 / 1.2,
            trips=trips.count / 10,
            max_trips=1,
            note="the reader's answers read by page.lua with the rows (those that offer actions)",
        ),
    ]
