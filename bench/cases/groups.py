"""Grouped items: a first page (with its counts) of an inbox holding 1,000
groups of 10 items, next to the plain page of an inbox holding the same
10,000 items ungrouped, measured in the same run: the read model stays flat,
so the grouped page costs what a plain one does (target: within 1.2x)."""

from django.contrib.auth import get_user_model

from bench import data
from bench.harness import Row, Stats, measure
from core.redis import get_redis
from messagecenter.items import message_detail, message_entry
from messagecenter.models import Message
from messagecenter.selectors import inbox_list
from messagecenter.services.inbox import inbox_deliver

GROUPS = 1_000
PER_GROUP = 10
ROUNDS = 10


def run(*, users: int, quick: bool) -> list[Row]:
    low, _high = data.ensure_users(users)
    User = get_user_model()
    operator, _ = User.objects.get_or_create(username="bench-operator", defaults={"is_staff": True})
    data.reset_items()
    get_redis().flushdb()
    plain_reader, grouped_reader = User.objects.get(pk=low), User.objects.get(pk=low + 1)
    items = GROUPS * PER_GROUP
    data.inbox_messages(operator=operator, audiences=[(items, [plain_reader.pk])])
    # The same number of messages for the grouped reader, each of one of the
    # 1,000 keys in turn, delivered oldest first as they would have arrived.
    refs = data.inbox_messages(operator=operator, audiences=[(items, [])])
    messages = list(Message.objects.filter(pk__in=[int(r[1:]) for r in refs]).order_by("created_at", "pk"))
    for i, message in enumerate(messages):
        message.group_key, message.actor = f"order:{i % GROUPS}", f"Actor {i % 7}"
    Message.objects.bulk_update(messages, ["group_key", "actor"], batch_size=2_000)
    for message in messages:
        inbox_deliver(entry=message_entry(message), user_ids=[grouped_reader.pk], detail=message_detail(message))

    grouped = inbox_list(user=grouped_reader, limit=20)
    assert grouped.unread_count == GROUPS, grouped.unread_count
    assert all(item.group and item.group["count"] == PER_GROUP for item in grouped.results), grouped.results[0]
    assert inbox_list(user=plain_reader, limit=20).unread_count == items
    calls = 500 if quick else 2_000
    # In alternating rounds: a busy machine's drift falls on both alike.
    plain, ours = Stats([]), Stats([])
    for _ in range(ROUNDS):
        plain.samples += measure(lambda: inbox_list(user=plain_reader, limit=20), repeat=calls // ROUNDS).samples
        ours.samples += measure(lambda: inbox_list(user=grouped_reader, limit=20), repeat=calls // ROUNDS).samples
    return [
        Row(
            "grouping",
            f"first page + counts, {GROUPS:,} groups of {PER_GROUP} items",
            ours.median,
            "s",
            f"first page + counts, the same {items:,} items ungrouped",
            plain.median,
            p99=ours.p99,
            baseline_p99=plain.p99,
            target=1 / 1.2,
            note="in process, the selector behind GET /api/v1/inbox/ (page of 20 with its counts); a grouped "
            "page reads one more hash field per grouped row on it (one HMGET), whatever the groups' number or size",
        )
    ]
