"""Global writes of the read model: item details, bulletins, pull items,
removals, push fan-out and the mirror of group memberships."""

from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any

from django.conf import settings
from pyroaring import BitMap
from redis.crc import key_slot

from core import keys
from core.lua import Packed, pack_filled
from core.redis import get_redis, is_cluster
from live import keys as live_keys
from live import transport as live
from messagecenter import keys as mc_keys
from messagecenter.readmodel.entries import CATEGORY_ORDER, InboxEntry, dumps
from messagecenter.readmodel.global_ops import (
    BulletinDelete,
    BulletinPut,
    DetailsMissing,
    ItemAdd,
    ItemPut,
    ItemRemove,
    PullRegister,
    RemovedTrim,
)
from messagecenter.readmodel.scripts import (
    DELIVER_SCRIPT,
    DropPrefixOp,
    FillItemsOp,
    InboxCall,
    inbox_call,
    run_inbox_calls,
)
from messagecenter.readmodel.user_part import users_held

AUDIENCE_EVERYONE = "all"
AUDIENCE_BITMAP = "bm"


def item_detail_put(*, ref: str, detail: Mapping[str, Any]) -> None:
    """Write (or refresh) what the inbox shows of an item."""
    ItemPut(details=[(ref, dumps(detail))])()


# Details a rebuild writes per call: a few hundred KB, well under a
# millisecond of Redis's time each.
DETAILS_BATCH = 500


def item_details_put(details: Iterable[tuple[str, Mapping[str, Any]]]) -> int:
    """``item_detail_put`` for many items (an edit reaching many), ``DETAILS_BATCH`` a call:
    a round trip per batch costs far less than loading the batch from
    PostgreSQL. Returns how many were written."""
    written = 0
    pending = iter(details)
    while batch := [(ref, dumps(detail)) for ref, detail in islice(pending, DETAILS_BATCH)]:
        ItemPut(details=batch)()
        written += len(batch)
    return written


# Refs a fill asks about per call: a HEXISTS each, well under a millisecond.
DETAILS_CHECK_BATCH = 1000


def item_details_missing(refs: Sequence[str]) -> list[str]:
    """Which of these items have no detail in Redis (a fill after a loss,
    or items nobody held since), ``DETAILS_CHECK_BATCH`` a call."""
    missing: list[str] = []
    for start in range(0, len(refs), DETAILS_CHECK_BATCH):
        missing += [ref.decode() for ref in DetailsMissing(refs=refs[start : start + DETAILS_CHECK_BATCH])()]
    return missing


def item_details_add(details: Sequence[tuple[InboxEntry, Mapping[str, Any]]], *, since: int, now_ms: int) -> int:
    """A fill's details of its user's items, where none is stored: never over a
    newer one, nor for an item removed since the removal log's version
    ``since`` or expired by ``now_ms``. Returns how many were added."""
    added = 0
    for start in range(0, len(details), DETAILS_BATCH):
        batch = [
            (entry.ref, entry.member, entry.expire_ms, dumps(detail))
            for entry, detail in details[start : start + DETAILS_BATCH]
        ]
        added += int(ItemAdd(since=since, now_ms=now_ms, details=batch)())
    return added


def bulletin_config(*, entry: InboxEntry, arrived_ms: int) -> dict[str, Any]:
    """What the merge on read needs of one bulletin (the config detail JSON)."""
    return {"member": entry.member, "score": entry.score, "expire": entry.expire_ms, "arrived": arrived_ms}


def bulletin_put(
    *,
    bulletin_id: int,
    entry: InboxEntry,
    detail: Mapping[str, Any],
    group_ids: Sequence[int],
    now_ms: int,
    edit: bool,
    arrived_ms: int = 0,
) -> int:
    """Replace a bulletin's config members (``<id>_<group>``, 0 = everyone).

    An edit also removes the bulletin from every inbox that merged it; the
    bumped ``bulletin:update:time`` makes each user merge it again (with
    its read bit, which lives in the bitmaps) if it is still visible to them.
    An edit that leaves every config as it was (only the detail changed)
    writes the detail alone and returns 0; otherwise the number of configs.
    ``arrived_ms`` (its creation) goes with the config for the mute rule.
    """
    config_detail = dumps(bulletin_config(entry=entry, arrived_ms=arrived_ms))
    groups = list(group_ids) or [0]
    op = BulletinPut(
        now_ms=now_ms,
        bulletin_id=bulletin_id,
        ref=entry.ref,
        detail_json=dumps(detail),
        removed_member=entry.member if edit else "",
        configs=[(f"{bulletin_id}_{group_id}", entry.score, config_detail) for group_id in groups],
    )
    return int(op())


def bulletin_delete(*, bulletin_id: int, entry: InboxEntry, now_ms: int) -> None:
    BulletinDelete(now_ms=now_ms, bulletin_id=bulletin_id, ref=entry.ref, member=entry.member)()


def _audience_chunks(audience: BitMap) -> dict[int, bytes]:
    """Redis bitmap strings per chunk of user ids (bit 0 = most significant bit)."""
    size = int(settings.MESSAGECENTER_BITMAP_CHUNK_USERS)
    chunks: dict[int, bytearray] = {}
    for user_id in audience:
        chunk, offset = divmod(int(user_id), size)
        data = chunks.setdefault(chunk, bytearray())
        index = offset >> 3
        if len(data) <= index:
            data.extend(b"\0" * (index + 1 - len(data)))
        data[index] |= 0x80 >> (offset & 7)
    return {chunk: bytes(data) for chunk, data in chunks.items()}


def pull_register(
    *, entry: InboxEntry, detail: Mapping[str, Any], audience: BitMap | None, announce: tuple[str, str] = ("", "")
) -> int:
    """Store a pull item once; users merge it on their next read.

    ``audience`` None means everyone; otherwise its bitmap is written first
    (chunked by user id, so no key grows past MESSAGECENTER_BITMAP_CHUNK_USERS
    bits), then the item is registered. Registering twice is a no-op.
    ``announce``: a live broadcast (``live.broadcast_parts``) the script
    publishes when it registers the item.
    """
    client = get_redis()
    if audience is not None:
        pipe = client.pipeline(transaction=False)
        for chunk, data in _audience_chunks(audience).items():
            pipe.set(mc_keys.pull_audience(entry.ref, chunk), data)
        pipe.execute()
    member = pull_member(entry, everyone=audience is None)
    return int(PullRegister(ref=entry.ref, detail_json=dumps(detail), pull_member=member, announce=announce)())


# The pull log's mark of a grouped item: a read looks up the details of those
# only (readmodel.grouping.merge_candidates), not of every item it merges.
PULL_GROUPED = "g"


def pull_member(entry: InboxEntry, *, everyone: bool) -> str:
    kind = AUDIENCE_EVERYONE if everyone else AUDIENCE_BITMAP
    grouped = f"|{PULL_GROUPED}" if entry.group_key else ""
    return f"{entry.member}|{entry.score}|{entry.expire_ms}|{kind}{grouped}"


def item_remove(*, entry: InboxEntry, pull_member: str = "") -> None:
    """Remove an item from every inbox at once: readers settle it on their next read."""
    ItemRemove(ref=entry.ref, member=entry.member, pull_member=pull_member)()
    # Whoever holds it settles the removal on their next read: tell open pages.
    live.broadcast(scope=live.BROADCAST_EVERYONE, reason="remove", ref=entry.ref)


def pull_audience_delete(*, ref: str, chunks: Iterable[int]) -> None:
    get_redis().delete(*(mc_keys.pull_audience(ref, c) for c in chunks))


# Recipients per deliver.lua call on a single Redis: a call blocks the server
# while it runs (about 6-7 µs per recipient measured here, its six commands
# and Lua's own work), and Redis runs one call while Python packs the next,
# so a chunk goes as several short calls (250 measured no better than 100).
DELIVER_BATCH = 100


def inbox_deliver(
    *, entry: InboxEntry, user_ids: Iterable[int], now_ms: int, notification: bool = False, held_only: bool = False
) -> int:
    """Push one item into these users' inboxes; returns how many inboxes gained it.

    ``held_only``: write only the parts Redis holds (filled, or being filled),
    as a fan-out does with healing on (docs/ARCHITECTURE.md, "Arrivals"); else
    every recipient's.

    Idempotent (ZADD NX); hidden refs stay out. The item arrives in each
    inbox (``all`` and the arrivals); the recipient's next read places it
    (deliver.lua). Each recipient whose inbox changed gets its live version
    bumped and, if a page of theirs listens, its event published inside the
    same script. On a single Redis: deliver.lua
    calls of ``DELIVER_BATCH`` recipients streamed on one connection
    (``LuaScript.stream``, keys packed from templates); on Redis
    Cluster one call per slot (recipients' keys carry their own hash tags).
    ``notification`` also records the item in each recipient's notification
    zset and the holders index (what the expiry sweep walks).
    """
    if entry.category not in CATEGORY_ORDER:
        raise ValueError(f"unknown category {entry.category!r}")
    targets = [int(user_id) for user_id in user_ids]
    if not targets:
        return 0
    head, tail = live.event_parts("deliver") if live.available() else ("", "")
    # The expiry zset goes with every delivery: an inbox over the cap loses its
    # expired members before its oldest live ones (caps on write, deliver.lua).
    expiry = True
    args = _deliver_args(entry, now_ms=now_ms, notification=notification, head=head, tail=tail, held_only=held_only)
    if is_cluster():
        # One call per slot, keys as strings (redis-py's cluster client routes them).
        by_slot: dict[int, list[int]] = {}
        for user_id in targets:
            by_slot.setdefault(key_slot(keys.user_tag(user_id).encode()), []).append(user_id)
        gained = 0
        for batch in by_slot.values():
            script_keys = mc_keys.deliver_keys(
                batch, notifications=notification, expiry=expiry, group_key=entry.group_key, held_only=held_only
            )
            gained += int(DELIVER_SCRIPT(script_keys, [*args, *live_keys.user_channels(batch)] if tail else args))
    else:
        templates = mc_keys.deliver_key_templates(
            notifications=notification, expiry=expiry, group_key=entry.group_key, held_only=held_only
        )
        channel = [live_keys.user_channel_template()]

        def calls() -> Iterator[tuple[Packed, list[Any]]]:
            # Built lazily: each call is sent while the next is packed (straight
            # into the protocol from the key templates: core.lua.pack_filled).
            for i in range(0, len(targets), DELIVER_BATCH):
                batch = targets[i : i + DELIVER_BATCH]
                yield pack_filled(templates, batch), [*args, pack_filled(channel, batch)] if tail else args

        gained = sum(int(r) for r in DELIVER_SCRIPT.stream(calls()))
    if notification:
        # The sweep walks the holders: with only held parts written, only
        # those hold the notification (a part filled later adds its user).
        holders = sorted(users_held(user_ids=targets)) if held_only else targets
        if holders:
            get_redis().sadd(mc_keys.notification_holders(), *holders)
    return gained


def _deliver_args(
    entry: InboxEntry, *, now_ms: int, notification: bool, head: str, tail: str, held_only: bool = False
) -> list[Any]:
    """deliver.lua's ARGV for one item (the expiry zset always in the stride)."""
    return [
        entry.member,
        entry.ref,
        entry.month,
        entry.score,
        entry.expire_ms,
        now_ms,
        # The stride of KEYS per recipient.
        7 + int(notification) + (2 if held_only else 0) + (5 if entry.group_key else 0),
        head,
        tail,
        int(settings.MESSAGECENTER_INBOX_MAX_ITEMS),  # the cap, kept on write
        int(settings.MESSAGECENTER_INBOX_SETTLE_STEP),
        "1",  # the stride holds the expiry zset
        entry.group_key,  # "" = not grouped: no group keys in the stride
        entry.actor,
        "1" if held_only else "",  # "" = every recipient written: no state hash and lock in the stride
    ]


# Items per fill_items.lua call: a call blocks the server while it runs, and
# it places each item too (measured here at 150 a call: 0.9 ms median, 2.9 ms
# the slowest, timed from Python; at 100: 0.8 ms median, the slowest 1.7 ms in
# Redis's slow log), so a 10,000-item fill goes as 100 calls of under a
# millisecond, well inside the 5 ms a call may take. They are streamed, so the
# extra calls cost no round trips.
FILL_BATCH = 100


def fill_item_calls(*, user_id: int, entries: Sequence[InboxEntry], now_ms: int) -> Iterator[InboxCall]:
    """fill_items.lua's calls that put these items (none grouped) into one user's
    inbox, ``FILL_BATCH`` a call, in their order (the bench times each one)."""
    cap = int(settings.MESSAGECENTER_INBOX_MAX_ITEMS)
    for start in range(0, len(entries), FILL_BATCH):
        batch = entries[start : start + FILL_BATCH]
        lines = "".join(f"{e.member} {e.score} {e.expire_ms} {'1' if e.ref.startswith('n') else '0'}\n" for e in batch)
        months = sorted({str(e.month) for e in batch})
        yield inbox_call(FillItemsOp(cap=cap, items=lines), user_id=user_id, now_ms=now_ms, months=months)


def inbox_deliver_each(*, user_id: int, entries: Sequence[InboxEntry], now_ms: int) -> None:
    """Push these items into one user's inbox (a user's fill): the items without
    a group in calls of ``FILL_BATCH`` (fill_items.lua: each placed at once, read
    or unread as the restored read state says), then the grouped ones in this
    order, since each joins the row of its key's items before it.
    Notifications are told by their ref ("n")."""
    plain = [entry for entry in entries if not entry.group_key]
    calls = fill_item_calls(user_id=user_id, entries=plain, now_ms=now_ms)
    if is_cluster():
        for call in calls:
            call()
    else:
        # Streamed on one connection: Redis runs a call while Python builds the
        # next one's lines, in order (each call's trim sees the ones before).
        FillItemsOp.script.stream((call.keys, call.args) for call in calls)
    _deliver_in_order(user_id, [entry for entry in entries if entry.group_key], now_ms)
    if any(entry.ref.startswith("n") for entry in entries):
        get_redis().sadd(mc_keys.notification_holders(), user_id)


def _deliver_in_order(user_id: int, entries: Sequence[InboxEntry], now_ms: int) -> None:
    """deliver.lua once per item, in this order: streamed on one connection on a
    single Redis, a call each on a cluster."""
    if not entries:
        return
    if is_cluster():
        for entry in entries:
            inbox_deliver(entry=entry, user_ids=[user_id], now_ms=now_ms, notification=entry.ref.startswith("n"))
        return
    head, tail = live.event_parts("deliver") if live.available() else ("", "")
    channel = pack_filled([live_keys.user_channel_template()], [user_id]) if tail else None

    def calls() -> Iterator[tuple[Packed, list[Any]]]:
        for entry in entries:
            notification = entry.ref.startswith("n")
            templates = mc_keys.deliver_key_templates(
                notifications=notification, expiry=True, group_key=entry.group_key
            )
            args = _deliver_args(entry, now_ms=now_ms, notification=notification, head=head, tail=tail)
            yield pack_filled(templates, [user_id]), [*args, channel] if channel is not None else args

    for _reply in DELIVER_SCRIPT.stream(calls()):
        pass


def user_groups_replace(
    *,
    groups_by_user: Mapping[int, Iterable[int]],
    now_ms: int,
    parked_by_user: Mapping[int, Sequence[str]] | None = None,
) -> None:
    """Mirror memberships, then drop the users' merged bulletins so the next
    read merges exactly what their groups show now; the bulletin members in
    ``parked_by_user`` (archived or snoozed) leave those places too."""
    client = get_redis()
    pipe = client.pipeline(transaction=False)
    user_ids = list(groups_by_user)
    for user_id in user_ids:
        key = mc_keys.user_groups(user_id)
        pipe.delete(key)
        group_ids = [int(g) for g in groups_by_user[user_id]]
        if group_ids:
            pipe.sadd(key, *group_ids)
        pipe.smembers(mc_keys.inbox_months(user_id))
    results = pipe.execute()
    months_by_user: dict[int, list[str]] = {}
    for user_id, result in zip(user_ids, [r for r in results if isinstance(r, set)], strict=True):
        months_by_user[user_id] = sorted(m.decode() for m in result)
    parked = parked_by_user or {}
    run_inbox_calls(
        [
            inbox_call(
                DropPrefixOp(prefix="b", parked=tuple(parked.get(user_id, ()))),
                user_id=user_id,
                now_ms=now_ms,
                months=months_by_user[user_id],
            )
            for user_id in user_ids
        ]
    )


def user_mutes_replace(*, mutes_by_user: Mapping[int, str]) -> None:
    """Mirror users' mute periods (``messagecenter.mutes.Mutes.dumps``; "" = none).

    Only the merge on read consults them, for items it has not merged yet:
    nothing already in an inbox changes, so nothing else needs to move.
    """
    pipe = get_redis().pipeline(transaction=False)
    for user_id, raw in mutes_by_user.items():
        if raw:
            pipe.set(mc_keys.user_mutes(user_id), raw)
        else:
            pipe.delete(mc_keys.user_mutes(user_id))
    pipe.execute()


def user_hidden_add(*, user_id: int, refs: Sequence[str]) -> None:
    """Record hidden refs, merged or not: no later merge brings them in."""
    if refs:
        get_redis().sadd(mc_keys.inbox_hidden(user_id), *refs)


def pull_expired_drop(*, pull_members: list[str], refs: list[str], audience_chunks: dict[str, list[int]]) -> None:
    """Housekeeping for expired items: readers already hide them by time;
    this only frees the global pull zset, details and audience bitmaps."""
    client = get_redis()
    pipe = client.pipeline(transaction=False)
    if pull_members:
        pipe.zrem(mc_keys.pull(), *pull_members)
    if refs:
        pipe.hdel(mc_keys.item_detail(), *refs)
    for ref, chunks in audience_chunks.items():
        if chunks:
            pipe.delete(*(mc_keys.pull_audience(ref, c) for c in chunks))
    pipe.execute()


def items_purge(
    *,
    refs: list[str],
    members: list[str],
    pull_members: list[str],
    audience_chunks: dict[str, list[int]],
    hidden: list[tuple[int, str]],
) -> None:
    """Forget items whose rows are being purged from PostgreSQL (retention):
    what is stored once (pull entry, detail, audience bitmaps, read-rate hours),
    their entries in the removed list (a retracted item long expired: every
    inbox still holding it drops it by expiry on its next read) and the
    hidden-set entries naming them. Each part is idempotent."""
    pull_expired_drop(pull_members=pull_members, refs=refs, audience_chunks=audience_chunks)
    if not refs and not hidden:
        return
    pipe = get_redis().pipeline(transaction=False)
    if members:
        pipe.zrem(mc_keys.removed(), *members)
    for ref in refs:
        pipe.delete(mc_keys.item_read_hours(ref))
    for user_id, ref in hidden:
        pipe.srem(mc_keys.inbox_hidden(user_id), ref)
    pipe.execute()


def removed_trim(*, keep: int) -> int:
    """Keep the newest ``keep`` removals; returns how many were dropped."""
    return int(RemovedTrim(keep=keep)())
