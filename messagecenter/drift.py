"""Drift checks of the message centre's read model (registered with ``durability.drift``).

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
from collections.abc import Callable, Collection, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from durability.drift import DriftCheck, Finding
from messagecenter import keys as mc_keys
from messagecenter import projection
from messagecenter.fill import held_users
from messagecenter.items import (
    bulletin_detail,
    bulletin_entry,
    details_of_messages,
    message_entry,
    notification_detail,
    notification_entry,
)
from messagecenter.models import (
    Bulletin,
    DeliveryMode,
    Message,
    MessageRecipient,
    MessageStatus,
    Notification,
    NotificationRecipient,
    Subscription,
)
from messagecenter.readmodel import InboxEntry, publish, to_ms
from messagecenter.readmodel import drift as drift_rm
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
        .order_by("pk")
    )


def _live_notifications() -> Any:
    return Notification.objects.filter(
        withdrawn=False, scheduled=False, expire_at__gt=timezone.now(), created_at__lte=_grace()
    ).order_by("pk")


def _detail_findings(details: dict[str, dict[str, Any]], *, pulled: Collection[str] = ()) -> list[Finding]:
    """``details``: ref -> the detail PostgreSQL implies; ``pulled``: the refs
    of pull messages, whose details the rebuild restores for everyone. A
    pushed item's detail comes back with the fill of a user who holds it: one
    missing is drift only while a recipient's part is in Redis."""
    stored = drift_rm.item_details_get(refs=list(details))
    needed = set(pulled) | _pushed_needed([r for r in details if r not in pulled and stored.get(r) is None])
    findings = []
    for ref, detail in details.items():
        want = _roundtrip(detail)
        have = stored.get(ref)
        if have == want or (have is None and ref not in needed):
            continue
        findings.append(
            Finding(
                area="item_details",
                key=mc_keys.item_detail(),
                member=ref,
                detail="detail missing" if have is None else "detail differs from PostgreSQL",
                fix=functools.partial(publish.item_detail_put, ref=ref, detail=want),
            )
        )
    return findings


def _pushed_needed(refs: Sequence[str], batch: int = 1000) -> set[str]:
    """Those of these pushed messages and notifications with a recipient whose
    part Redis holds (every recipient with healing off), their recipient rows
    looked at ``batch`` users at a time."""
    needed: set[str] = set()
    for model, kind, column in (
        (MessageRecipient, "m", "message_id"),
        (NotificationRecipient, "n", "notification_id"),
    ):
        ids = [int(r[1:]) for r in refs if r[0] == kind]
        if not ids:
            continue
        rows = list(model.objects.filter(**{f"{column}__in": ids}).values_list("user_id", column))
        for chunk in _batches(rows, batch):
            items_of: dict[int, list[int]] = {}
            for user_id, item_id in chunk:
                items_of.setdefault(user_id, []).append(item_id)
            for user_id in projection.held(items_of):
                needed.update(f"{kind}{item_id}" for item_id in items_of[user_id])
    return needed


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
    """Every live pull message has its detail; every stored detail of a live
    message or notification equals what PostgreSQL implies; details of
    retracted, withdrawn, cleaned-up or deleted ones are gone. (Bulletins'
    details belong to the bulletins area.)"""
    findings: list[Finding] = []
    messages = list(_live_messages())
    for batch in _batches(messages, 500):
        pulled = {m.ref for m in batch if m.delivery == DeliveryMode.PULL}
        findings.extend(_detail_findings(details_of_messages(batch), pulled=pulled))
    notifications = list(_live_notifications())
    for batch in _batches(notifications, 500):
        findings.extend(_detail_findings({n.ref: notification_detail(n) for n in batch}))
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


# --- memberships --------------------------------------------------------------------


def memberships_find() -> list[Finding]:
    """The group set of each user whose part Redis holds equals their membership rows."""
    findings: list[Finding] = []
    for user_ids in held_users(BATCH):
        # PostgreSQL first: a change committed between the reads shows once and is mended by a no-op.
        want = projection.user_group_ids(user_ids)
        for user_id, have in zip(user_ids, drift_rm.user_groups_get_many(user_ids=user_ids), strict=True):
            if have != set(want[user_id]):
                findings.append(
                    Finding(
                        area="memberships",
                        key=mc_keys.user_groups(user_id),
                        detail=f"holds groups [{_ids(sorted(have))}], PostgreSQL says [{_ids(sorted(want[user_id]))}]",
                        fix=user_id,
                    )
                )
    return findings


def memberships_repair(findings: Sequence[Finding]) -> None:
    for user_ids in _batches(sorted({int(f.fix) for f in findings})):
        projection.user_groups(user_ids)


# --- deliveries ---------------------------------------------------------------------


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
    DriftCheck("subscribers", "subscriber sets per (message type, scope)", subscribers_find, subscribers_repair),
    DriftCheck("memberships", "group sets of the users whose part Redis holds", memberships_find, memberships_repair),
]
