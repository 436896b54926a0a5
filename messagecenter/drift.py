"""Drift checks of the message centre's read model (registered with ``core.drift``).

Each area reads PostgreSQL first and Redis second (through
``messagecenter/readmodel/drift.py``), so a change committed between the two
reads is in Redis already or shows as drift once, mended by a repair that
rewrites the same state. Repairs of memberships, bulletins, removals and
subscriber sets call the same idempotent functions of
``messagecenter.projection`` that the receivers, the outbox and
``messagecenter_rebuild`` use, for the drifted things only.
"""

import functools
import json
import random
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils import timezone

from core.drift import DriftCheck, Finding
from messagecenter import keys as mc_keys
from messagecenter import projection
from messagecenter.items import (
    bulletin_detail,
    bulletin_entry,
    message_detail,
    message_entry,
    notification_detail,
    notification_entry,
)
from messagecenter.models import (
    Bulletin,
    DeliveryMode,
    InboxHidden,
    Message,
    MessageStatus,
    Notification,
    Subscription,
    UserGroupMembership,
)
from messagecenter.readmodel import InboxEntry, grouping, publish, to_ms
from messagecenter.readmodel import drift as drift_rm
from messagecenter.readmodel.entries import CATEGORY_ORDER
from messagecenter.readmodel.inbox import inbox_settle
from messagecenter.selectors import muted_among
from messagecenter.services.delivery import delivery_pending, delivery_relay

BATCH = 1000


def _batches(values: Sequence[Any], size: int = BATCH) -> Iterator[Sequence[Any]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def _roundtrip(value: Any) -> Any:
    """What a value looks like after the JSON trip through Redis (tuples become lists)."""
    return json.loads(json.dumps(value))


def _ids(values: Sequence[Any], shown: int = 10) -> str:
    text = ", ".join(str(v) for v in values[:shown])
    return text + (f" and {len(values) - shown} more" if len(values) > shown else "")


def _run_fixes(findings: Sequence[Finding]) -> None:
    """Repair of areas whose findings each carry their own mend (a callable)."""
    done: set[Callable[[], None]] = set()
    for finding in findings:
        fix: Callable[[], None] = finding.fix
        if fix not in done:
            fix()
            done.add(fix)


def _now_ms() -> int:
    return to_ms(timezone.now())


# --- user groups --------------------------------------------------------------------


def user_groups_find() -> list[Finding]:
    """Every user's group set equals their UserGroupMembership rows, 1,000 users a batch.

    Walks all users (not only members) so a set left behind after a user's
    last membership went is found too.
    """
    findings: list[Finding] = []
    user_ids = list(get_user_model().objects.order_by("pk").values_list("pk", flat=True))
    for batch in _batches(user_ids):
        want: dict[int, set[int]] = {int(u): set() for u in batch}
        # mc_membership_user_idx serves this lookup by user.
        for user_id, group_id in UserGroupMembership.objects.filter(user_id__in=batch).values_list(
            "user_id", "group_id"
        ):
            want[int(user_id)].add(int(group_id))
        have = drift_rm.user_groups_get(user_ids=list(want))
        for user_id, groups in want.items():
            if have[user_id] == groups:
                continue
            problems = []
            if groups - have[user_id]:
                problems.append(f"missing groups {_ids(sorted(groups - have[user_id]))}")
            if have[user_id] - groups:
                problems.append(f"extra groups {_ids(sorted(have[user_id] - groups))}")
            findings.append(
                Finding(area="user_groups", key=mc_keys.user_groups(user_id), detail="; ".join(problems), fix=user_id)
            )
    return findings


def user_groups_repair(findings: Sequence[Finding]) -> None:
    for batch in _batches(sorted({int(f.fix) for f in findings})):
        projection.user_groups(batch)


# --- hidden items -------------------------------------------------------------------


def hidden_find() -> list[Finding]:
    """Every InboxHidden row is in its user's hidden set (so a rebuild or a
    redelivery can never bring the item back)."""
    findings: list[Finding] = []
    rows = list(InboxHidden.objects.order_by("pk").values_list("user_id", "item_id"))
    for batch in _batches(rows):
        pairs = [(int(u), str(ref)) for u, ref in batch]
        for (user_id, ref), present in zip(pairs, drift_rm.hidden_contains(pairs=pairs), strict=True):
            if not present:
                findings.append(
                    Finding(
                        area="hidden",
                        key=mc_keys.inbox_hidden(user_id),
                        member=ref,
                        detail=f"{ref} hidden in PostgreSQL, not in Redis",
                        fix=(user_id, ref),
                    )
                )
    return findings


def hidden_repair(findings: Sequence[Finding]) -> None:
    now_ms = _now_ms()
    for finding in findings:
        user_id, ref = finding.fix
        publish.user_hidden_add(user_id=user_id, ref=ref, now_ms=now_ms)


# --- bulletins ----------------------------------------------------------------------


def _bulletin_expected(bulletin: Bulletin) -> tuple[dict[str, int], dict[str, Any], dict[str, Any]]:
    """(config member -> display ms, config detail JSON, item detail JSON) as bulletin_put writes them."""
    entry = bulletin_entry(bulletin)
    group_ids = sorted(g.pk for g in bulletin.groups.all()) or [0]
    scores = {f"{bulletin.pk}_{g}": entry.score for g in group_ids}
    config = publish.bulletin_config(entry=entry, arrived_ms=to_ms(bulletin.created_at))
    return scores, config, _roundtrip(bulletin_detail(bulletin))


def _loads(raw: str | None) -> Any:
    try:
        return json.loads(raw) if raw is not None else None
    except ValueError:
        return None


def bulletins_find() -> list[Finding]:
    """Config zset members and scores, config detail hash, members hash, change log
    and the item detail of every bulletin equal what PostgreSQL's bulletins and groups imply."""
    bulletins = list(Bulletin.objects.select_related("created_by").prefetch_related("groups").order_by("pk"))
    redis_config = drift_rm.bulletin_config_read()
    details = drift_rm.item_details_get(refs=[b.ref for b in bulletins])
    by_bulletin: dict[str, list[str]] = {}
    for member in {*redis_config.scores, *redis_config.logged}:
        by_bulletin.setdefault(member.partition("_")[0], []).append(member)
    findings: list[Finding] = []
    for bulletin in bulletins:
        scores, config, detail = _bulletin_expected(bulletin)
        named = set(by_bulletin.get(str(bulletin.pk), []))  # by the config zset or the change log
        problems, stray = _bulletin_config_problems(
            bid=str(bulletin.pk), scores=scores, config=config, named=named, redis_config=redis_config
        )
        if details.get(bulletin.ref) != detail:
            problems.append("item detail missing" if details.get(bulletin.ref) is None else "item detail differs")
        if problems:
            findings.append(
                Finding(
                    area="bulletins",
                    key=mc_keys.bulletin_config(),
                    member=bulletin.ref,
                    detail="; ".join(problems),
                    fix=functools.partial(_bulletin_remirror, bulletin.pk, tuple(stray)),
                )
            )
    known = {str(bulletin.pk) for bulletin in bulletins}
    return findings + _stale_bulletins_find(known=known, by_bulletin=by_bulletin, redis_config=redis_config)


def _bulletin_config_problems(
    *,
    bid: str,
    scores: dict[str, int],
    config: dict[str, Any],
    named: set[str],
    redis_config: drift_rm.BulletinConfig,
) -> tuple[list[str], list[str]]:
    """(problems, stray members) of one live bulletin's entries in the global
    config structures; ``named`` are its members the config zset or the change log name."""
    held = {m for m in named if m in redis_config.scores}
    problems = []
    if set(scores) - held:
        problems.append(f"config lacks {_ids(sorted(set(scores) - held))}")
    stray = sorted(named - set(scores))
    if stray:
        problems.append(f"config or change log has stray {_ids(stray)}")
    if set(scores) - redis_config.logged:
        # Readers past the log's floor take in only what the log names.
        problems.append(f"change log lacks {_ids(sorted(set(scores) - redis_config.logged))}")
    if any(m in held and redis_config.scores.get(m) != s for m, s in scores.items()):
        problems.append("wrong display time in the config zset")
    if any(m in held and _loads(redis_config.details.get(m)) != config for m in scores):
        problems.append("config detail differs")
    if set(redis_config.members.get(bid, "").split(",")) - {""} != set(scores):
        problems.append("members hash differs")
    return problems, stray


def _stale_bulletins_find(
    *, known: set[str], by_bulletin: dict[str, list[str]], redis_config: drift_rm.BulletinConfig
) -> list[Finding]:
    """Bulletins Redis still names (config, members hash, change log or an
    item detail) that PostgreSQL no longer has."""
    stale_ids = (set(by_bulletin) | set(redis_config.members)) - known
    stale_ids |= {ref[1:] for ref in drift_rm.item_detail_refs() if ref.startswith("b")} - known
    findings: list[Finding] = []
    for bid in sorted(stale_ids, key=lambda b: (len(b), b)):
        members = tuple(by_bulletin.get(bid, []))
        inbox_member = _stale_bulletin_member(bid, members, redis_config.details)
        findings.append(
            Finding(
                area="bulletins",
                key=mc_keys.bulletin_config(),
                member=f"b{bid}",
                detail="bulletin not in PostgreSQL but still in Redis",
                fix=functools.partial(_bulletin_forget, bid, members, inbox_member),
            )
        )
    return findings


def _stale_bulletin_member(bid: str, members: Sequence[str], config_details: dict[str, str]) -> str:
    """The inbox member of a deleted bulletin, from what Redis still says of it ("" if nothing)."""
    for member in members:
        config = _loads(config_details.get(member))
        if isinstance(config, dict) and config.get("member"):
            return str(config["member"])
    detail = drift_rm.item_details_get(refs=[f"b{bid}"]).get(f"b{bid}")
    return str(detail.get("member") or "") if detail else ""


def _bulletin_remirror(bulletin_id: int, stray: tuple[str, ...]) -> None:
    drift_rm.bulletin_config_drop(members=stray)
    # As an edit: inboxes that merged it settle it and merge it again from
    # the mended config (read bits live in the bitmaps and survive).
    projection.bulletins([bulletin_id], edit=True)


def _bulletin_forget(bid: str, members: tuple[str, ...], inbox_member: str) -> None:
    drift_rm.bulletin_config_drop(members=members, bulletin_ids=[int(bid)] if bid.isdigit() else [])
    if inbox_member and bid.isdigit():
        # The same removal a delete projects: config, detail, and every inbox settles it.
        projection.bulletin_removed(int(bid), InboxEntry.from_member(inbox_member))
    else:
        drift_rm.item_details_drop(refs=[f"b{bid}"])


# --- item details -------------------------------------------------------------------


def _grace() -> datetime:
    """Items younger than this may still wait for their delivery task: not drift yet."""
    return timezone.now() - timedelta(seconds=float(settings.MESSAGECENTER_CHECK_GRACE_SECONDS))


def _live_messages() -> Any:
    now = timezone.now()
    # mc_message_status_idx serves the (status, expire_at) filter. Queued ones
    # wait for their delivery task, which writes the detail first.
    return (
        Message.objects.filter(status__in=[MessageStatus.DELIVERING, MessageStatus.DELIVERED])
        .filter(Q(expire_at__isnull=True) | Q(expire_at__gt=now))
        .defer("audience_bitmap", "users_bitmap")  # details never need the audience
        .select_related("sender")
        .prefetch_related("image_files")
        .order_by("pk")
    )


def _live_notifications() -> Any:
    return Notification.objects.filter(
        withdrawn=False, scheduled=False, expire_at__gt=timezone.now(), created_at__lte=_grace()
    ).order_by("pk")


def _detail_findings(items: Sequence[Any], build: Callable[[Any], dict[str, Any]]) -> list[Finding]:
    stored = drift_rm.item_details_get(refs=[item.ref for item in items])
    findings = []
    for item in items:
        want = _roundtrip(build(item))
        have = stored.get(item.ref)
        if have == want:
            continue
        findings.append(
            Finding(
                area="item_details",
                key=mc_keys.item_detail(),
                member=item.ref,
                detail="detail missing" if have is None else "detail differs from PostgreSQL",
                fix=functools.partial(publish.item_detail_put, ref=item.ref, detail=want),
            )
        )
    return findings


def _stale_detail_fix(ref: str, row: Any, stored: dict[str, Any] | None) -> tuple[str, Callable[[], None]] | None:
    """Why a stored detail must go and how, or None when PostgreSQL still backs it.
    ``row`` is the message or notification the ref names (None: deleted)."""
    if isinstance(row, Message):
        return _stale_message_fix(ref, row)
    if isinstance(row, Notification):
        return _stale_notification_fix(ref, row)
    member = str((stored or {}).get("member") or "")
    if member:
        # Deleted: every inbox settles the member it still holds.
        return "deleted in PostgreSQL", functools.partial(projection.item_removed, InboxEntry.from_member(member))
    return "deleted in PostgreSQL", functools.partial(drift_rm.item_details_drop, refs=[ref])


def _stale_message_fix(ref: str, row: Message) -> tuple[str, Callable[[], None]] | None:
    """A retracted message leaves every inbox; an expired one is cleaned up as
    the expiry sweep does; any other status still backs its detail."""
    entry = message_entry(row)
    pull = publish.pull_member(entry, everyone=row.everyone) if row.delivery == DeliveryMode.PULL else ""
    if row.status == MessageStatus.RETRACTED:
        return "message retracted", functools.partial(projection.item_removed, entry, pull)
    if row.status == MessageStatus.EXPIRED:
        return "message expired and cleaned up", functools.partial(
            publish.pull_expired_drop, pull_members=[pull] if pull else [], refs=[ref], audience_chunks={}
        )
    return None


def _stale_notification_fix(ref: str, row: Notification) -> tuple[str, Callable[[], None]] | None:
    """A withdrawn notification leaves every inbox; a swept one (details freed)
    loses its detail as the sweep does; otherwise it still backs its detail."""
    if row.withdrawn:
        return "notification withdrawn", functools.partial(projection.item_removed, notification_entry(row))
    if row.details_freed:
        return "notification expired and swept", functools.partial(
            publish.pull_expired_drop, pull_members=[], refs=[ref], audience_chunks={}
        )
    return None


def item_details_find() -> list[Finding]:
    """Every live message and notification has its detail, equal to what PostgreSQL
    implies; details of retracted, withdrawn, cleaned-up or deleted ones are gone.
    (Bulletins' details belong to the bulletins area.)"""
    findings: list[Finding] = []
    messages = list(_live_messages())
    for batch in _batches(messages, 500):
        findings.extend(_detail_findings(batch, message_detail))
    notifications = list(_live_notifications())
    for batch in _batches(notifications, 500):
        findings.extend(_detail_findings(batch, notification_detail))
    live = {m.ref for m in messages} | {n.ref for n in notifications}
    refs = [r for r in drift_rm.item_detail_refs() if r[:1] in {"m", "n"} and r[1:].isdigit() and r not in live]
    for batch in _batches(refs):
        findings.extend(_stale_detail_findings(batch))
    return findings


def _rows_of(refs: Sequence[str]) -> dict[str, Any]:
    """ref -> the message or notification row it names, for those PostgreSQL still has."""
    rows: dict[str, Any] = {}
    for model, kind in ((Message, "m"), (Notification, "n")):
        pks = [int(r[1:]) for r in refs if r[0] == kind]
        rows.update({f"{kind}{pk}": row for pk, row in model.objects.in_bulk(pks).items()} if pks else {})
    return rows


def _stale_detail_findings(refs: Sequence[str]) -> list[Finding]:
    """Findings for the stored details (of refs not live) that PostgreSQL no longer backs."""
    rows = _rows_of(refs)
    stored = drift_rm.item_details_get(refs=list(refs))
    findings: list[Finding] = []
    for ref in refs:
        stale = _stale_detail_fix(ref, rows.get(ref), stored.get(ref))
        if stale is not None:
            reason, fix = stale
            findings.append(
                Finding(
                    area="item_details",
                    key=mc_keys.item_detail(),
                    member=ref,
                    detail=f"stale detail: {reason}",
                    fix=fix,
                )
            )
    return findings


# --- subscribers --------------------------------------------------------------------


def subscribers_find() -> list[Finding]:
    """Each (type, scope) subscriber set equals its Subscription rows; sets of a
    (type, scope) without rows (found by SCAN) are empty."""
    want: dict[tuple[int, str], set[str]] = {}
    for subscription in Subscription.objects.only("message_type_id", "scope", "user_id", "group_id"):
        want.setdefault((subscription.message_type_id, subscription.scope), set()).add(subscription.subscriber)
    pairs = sorted(set(want) | drift_rm.subscriber_set_pairs())
    findings: list[Finding] = []
    for batch in _batches(pairs):
        for (type_id, scope), have in zip(batch, drift_rm.subscribers_get_many(pairs=list(batch)), strict=True):
            expected = want.get((type_id, scope), set())
            if have == expected:
                continue
            problems = []
            if expected - have:
                problems.append(f"missing {_ids(sorted(expected - have))}")
            if have - expected:
                problems.append(f"extra {_ids(sorted(have - expected))}")
            findings.append(
                Finding(
                    area="subscribers",
                    key=mc_keys.subscribers(type_id, scope),
                    detail="; ".join(problems),
                    fix=(type_id, scope),
                )
            )
    return findings


def subscribers_repair(findings: Sequence[Finding]) -> None:
    for type_id, scope in sorted({f.fix for f in findings}):
        projection.subscribers(type_id, scope)


# --- push deliveries ----------------------------------------------------------------


def _sample(audience: Any, size: int) -> list[int]:
    if len(audience) <= size:
        return [int(u) for u in audience]
    # A fresh random sample each run: over many runs every recipient gets looked at.
    picks = random.Random().sample(range(len(audience)), size)  # noqa: S311 - sampling, not security
    return sorted(int(audience[i]) for i in picks)


def push_deliveries_find() -> list[Finding]:
    """For the newest delivered push messages, a sample of the audience holds the
    item in the inbox zset, unless they hid it, it expired, or the inbox is full.

    Sampled because a full check is O(users x items): every recipient of every
    live message. ``MESSAGECENTER_CHECK_PUSH_SAMPLE`` recipients of at most
    ``MESSAGECENTER_CHECK_PUSH_MESSAGES`` messages bound each run, and a
    different sample each run covers the rest over time.
    """
    now = timezone.now()
    sample_size = int(settings.MESSAGECENTER_CHECK_PUSH_SAMPLE)
    cap = int(settings.MESSAGECENTER_INBOX_MAX_ITEMS)
    messages = list(
        Message.objects.filter(delivery=DeliveryMode.PUSH, status=MessageStatus.DELIVERED)
        .filter(Q(expire_at__isnull=True) | Q(expire_at__gt=now))
        .order_by("-created_at", "-pk")[: int(settings.MESSAGECENTER_CHECK_PUSH_MESSAGES)]
    )
    users = get_user_model().objects
    findings: list[Finding] = []
    for message in messages:
        sample = _sample(message.audience, sample_size)
        if not sample:
            continue
        entry = message_entry(message)
        existing = set(users.filter(pk__in=sample).values_list("pk", flat=True))
        hidden = set(
            InboxHidden.objects.filter(item_id=entry.ref, user_id__in=sample).values_list("user_id", flat=True)
        )
        # Users who muted the category when the message was sent never got it (messagecenter.mutes).
        hidden |= muted_among(user_ids=sample, category=entry.category, time_ms=entry.score)
        if entry.group_key:  # a grouped item a newer one of its group took the row of is out of the list
            hidden |= grouping.group_holds(group_key=entry.group_key, member=entry.member, user_ids=sample)
        probes = drift_rm.inbox_probe(member=entry.member, ref=entry.ref, user_ids=sample)
        for user_id, probe in probes.items():
            if probe.present or probe.hidden or user_id in hidden or user_id not in existing:
                continue
            if probe.size >= cap:
                continue  # a full inbox drops its oldest items on read: absence proves nothing
            findings.append(
                Finding(
                    area="push_deliveries",
                    key=mc_keys.inbox(user_id),
                    member=entry.member,
                    detail=f"{entry.ref} was pushed to user {user_id} but is not in the inbox",
                    fix=(message.pk, user_id),
                )
            )
    return findings


def push_deliveries_repair(findings: Sequence[Finding]) -> None:
    by_message: dict[int, list[int]] = {}
    for finding in findings:
        message_id, user_id = finding.fix
        by_message.setdefault(message_id, []).append(user_id)
    now_ms = _now_ms()
    for message in Message.objects.filter(pk__in=list(by_message)):
        if message.status == MessageStatus.RETRACTED:
            continue  # retracted since the check: nothing to redeliver
        # The fan-out's own write: NX, hidden refs stay out, expired items are skipped.
        publish.inbox_deliver(entry=message_entry(message), user_ids=by_message[message.pk], now_ms=now_ms)


# --- unread index ---------------------------------------------------------------------


def unread_index_find() -> list[Finding]:
    """For a random sample of users: each unread counter equals the size of its
    category's unread zset, and the all zset holds as many as the categories
    together (the inbox scripts keep both exact; an unread-only page reads the zsets).

    Redis-only invariants: both sides change in the same script, so no
    PostgreSQL read is needed. ``MESSAGECENTER_CHECK_PUSH_SAMPLE`` users a run.
    """
    ids = list(get_user_model().objects.values_list("pk", flat=True))
    sample = _sample(ids, int(settings.MESSAGECENTER_CHECK_PUSH_SAMPLE))
    findings: list[Finding] = []
    for user_id, index in drift_rm.unread_index_read(user_ids=sample, categories=CATEGORY_ORDER).items():
        wrong = [c for c in CATEGORY_ORDER if index.counters[c] != index.sizes[c]]
        if sum(index.sizes[c] for c in CATEGORY_ORDER) != index.sizes[""]:
            wrong.append("all")
        if wrong:
            findings.append(
                Finding(
                    area="unread_index",
                    key=mc_keys.inbox_unread(user_id),
                    detail=f"unread counters {index.counters} but unread zsets {index.sizes} ({', '.join(wrong)})",
                    fix=user_id,
                )
            )
    return findings


def unread_index_repair(findings: Sequence[Finding]) -> None:
    """Build each user's unread zsets and counters anew from the read bits (what
    their next read does once told to; settled here so the re-check sees it)."""
    user_ids = sorted({f.fix for f in findings})
    drift_rm.unread_index_rebuild(user_ids=user_ids)
    inbox_settle(user_ids=user_ids, now_ms=_now_ms())


def deliveries_find() -> list[Finding]:
    """Delivery work committed and not done yet (pending rows, services.delivery).

    A row a worker is running right now shows too; the repair then runs it
    here as well, which changes nothing (delivery is idempotent).
    """
    return [
        Finding(
            area="deliveries",
            key=f"{row.task}:{row.object_id}:{row.index}",
            detail=f"not delivered yet ({row.attempts} failed attempts) {row.last_error}".strip(),
        )
        for row in delivery_pending()
    ]


def deliveries_repair(findings: Sequence[Finding]) -> None:
    """Run every pending delivery here, their chunks included, until done or
    Redis fails (then the rows stay for the relay and show in the re-check)."""
    delivery_relay(limit=max(len(findings), 1) * 1000, inline=True, due_only=False)


CHECKS = [
    # First: a delivery done here is what the other areas then find in Redis.
    DriftCheck(
        "deliveries", "committed messages and notifications not delivered yet", deliveries_find, deliveries_repair
    ),
    DriftCheck(
        "bulletins",
        "bulletin config zset, config detail, members hash, change log and bulletin details",
        bulletins_find,
        _run_fixes,
    ),
    DriftCheck(
        "item_details",
        "details of live messages and notifications; none of removed ones",
        item_details_find,
        _run_fixes,
    ),
    DriftCheck("user_groups", "per-user group sets against memberships", user_groups_find, user_groups_repair),
    DriftCheck("hidden", "per-user hidden sets against InboxHidden rows", hidden_find, hidden_repair),
    DriftCheck("subscribers", "subscriber sets per (message type, scope)", subscribers_find, subscribers_repair),
    DriftCheck(
        "push_deliveries",
        "a sample of each recent push message's recipients hold it in their inbox",
        push_deliveries_find,
        push_deliveries_repair,
    ),
    DriftCheck(
        "unread_index",
        "a sample of users' unread counters equal their unread zsets' sizes",
        unread_index_find,
        unread_index_repair,
    ),
]
