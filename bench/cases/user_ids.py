"""User ids up to 10^9: the same data for the user with id 1 and a user with
id 1,000,000,000, and what each costs: the announcement count, the inbox's
first page with counts, and the Redis bytes of the user's own state (every
key of the user's hash tag, and the announcement read-state chunks the
user's marks wrote). Ids are a database sequence: nothing bounds them to the
number of users, so no cost may grow with one."""

from django.contrib.auth import get_user_model

from bench import data
from bench.harness import GrowthRow, measure
from core.redis import get_redis
from messagecenter.selectors import inbox_list
from messagecenter.services.inbox import inbox_mark_read
from notices import keys as notice_keys
from notices import readmodel as notices_readmodel
from notices.models import Announcement
from notices.selectors import announcement_counts
from notices.services import announcement_mark_read

CASE = "user ids up to 10^9"
HIGH_ID = 1_000_000_000
ITEMS = 100
ANNOUNCEMENTS = 100
PLATFORM = "user"
FACTOR = 1.5  # a high id may cost at most this many times what id 1 costs


def _announcement_bytes(user_id: int, announcement_ids: list[int]) -> int:
    """MEMORY USAGE of the read-state chunks holding this user's bits (only
    these two users mark here, so each chunk holds one user's marks)."""
    client = get_redis()
    chunk = notices_readmodel.user_slot(user_id)[0]
    return sum(
        int(client.memory_usage(notice_keys.bitmap(PLATFORM, chunk, a), samples=0) or 0) for a in announcement_ids
    )


def _inbox_bytes(user_id: int) -> int:
    client = get_redis()
    return sum(int(client.memory_usage(k, samples=0) or 0) for k in data.user_redis_keys(user_id))


def run(*, users: int, quick: bool) -> list[GrowthRow]:
    data.ensure_users(users)
    User = get_user_model()
    operator, _ = User.objects.get_or_create(username="bench-operator", defaults={"is_staff": True})
    low = User.objects.filter(pk=1).first() or User.objects.filter(username__regex=r"^bench[0-9]+$").order_by("pk")[0]
    high = User.objects.filter(pk=HIGH_ID).first() or User.objects.create(pk=HIGH_ID, username="bench-id-high")
    data.reset_items()
    Announcement.objects.all().delete()
    get_redis().flushdb()

    created = data.live_announcements(operator=operator, count=ANNOUNCEMENTS)
    refs = data.inbox_messages(operator=operator, audiences=[(ITEMS, [low.pk, high.pk])])
    marked = [a.pk for a in created[: ANNOUNCEMENTS * 3 // 10]]
    for user in (low, high):
        for announcement_id in marked:
            announcement_mark_read(user=user, announcement_id=announcement_id)
        for ref in refs[: ITEMS * 3 // 10]:
            inbox_mark_read(user=user, item_id=ref)
    for user in (low, high):
        counts = announcement_counts(user=user)
        assert counts == {"read": len(marked), "unread": ANNOUNCEMENTS - len(marked)}, (user.pk, counts)
        page = inbox_list(user=user, limit=20)
        assert len(page.results) == 20, (user.pk, page)
        assert page.unread_count == ITEMS - ITEMS * 3 // 10, (user.pk, page.unread_count)

    calls = 300 if quick else 1000
    # A default argument binds the loop variable: mypy cannot infer such a lambda.
    count_times = [measure(lambda u=u: announcement_counts(user=u), repeat=calls, warmup=20) for u in (low, high)]  # type: ignore[misc]
    # A default argument binds the loop variable: mypy cannot infer such a lambda.
    page_times = [measure(lambda u=u: inbox_list(user=u, limit=20), repeat=calls, warmup=20) for u in (low, high)]  # type: ignore[misc]
    sizes = [f"id {low.pk:,}", "id 10^9"]
    note = f"the same data for both: {ITEMS} inbox items and {ANNOUNCEMENTS} live announcements, 30% of each read"

    def row(name: str, values: list[float], unit: str, row_note: str = note) -> GrowthRow:
        # Both users side by side: met while the high id costs at most FACTOR times the low one.
        return GrowthRow.ratio_within(CASE, name, sizes, values, unit, FACTOR, note=row_note)

    return [
        row("announcement read/unread counts, median (in process)", [t.median for t in count_times], "s"),
        row("inbox first page + counts, median (in process)", [t.median for t in page_times], "s"),
        row(
            "announcement read state bytes (the chunks holding the user's marks)",
            [float(_announcement_bytes(u.pk, marked)) for u in (low, high)],
            "B",
            f"MEMORY USAGE of the read-state keys of the {len(marked)} announcements each user read, in the "
            "user's chunk (chunk and offset from the user id)",
        ),
        row(
            "inbox Redis bytes (every key of the user's hash tag)",
            [float(_inbox_bytes(u.pk)) for u in (low, high)],
            "B",
        ),
    ]
