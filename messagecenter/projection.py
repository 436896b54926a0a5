"""The message centre's read-model writes for model changes: the one path to Redis.

Memberships (a user's groups), bulletins (config and detail), details of
messages, removals of retracted, withdrawn or deleted items, and subscriber
sets and users' mute periods are written to Redis only by the functions here. Two ways in:

- *now* (``user_groups``, ``bulletin``, ``item_removed``, ...): take ids,
  reload from PostgreSQL what they need, write Redis; idempotent, so tasks,
  the outbox replay, ``messagecenter_rebuild`` and the drift repair call them
  as they are;
- *after commit* (``user_groups_changed``, ``bulletin_changed``, ...): what
  the model signals' receivers (``messagecenter.signals``, one line each) and
  the services call. They go through ``durability.projection.project``: one run per
  projection and key per transaction, after commit, and into the outbox if
  Redis fails then.

A service that knows more than a receiver passes it explicitly:
``bulletin_created`` hands over the new bulletin's entry, detail and group
ids (taken when it is called), so the run at commit writes them without
reloading. The receiver's own requests of that transaction (the insert, the
groups added) coalesce with it into that one run, and a later change in the
same transaction (a save, groups changed) asks again without facts: the last
request decides, so the run then reloads (see ``durability.projection``).

Membership changes reach Redis right after commit however they are made: the
group services (bulk inserts, which send no signals, call
``user_groups_changed`` themselves), the admin, and the ORM (``post_save``
and ``post_delete`` of ``UserGroupMembership``, ``m2m_changed`` of
``group.members`` and ``user.message_groups`` from either side, cascades of a
deleted user or group): each asks for ``user_groups`` of the users concerned,
and the requests of one transaction become one run.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from durability import healing, projection
from live import transport as live
from messagecenter.items import bulletin_detail, bulletin_entry, details_of_messages, message_entry, notification_entry
from messagecenter.models import (
    Bulletin,
    DeliveryMode,
    InboxHidden,
    InboxItemState,
    Message,
    MessageResponse,
    MessageStatus,
    MutePeriod,
    Notification,
    Subscription,
    UserGroup,
    UserGroupMembership,
)
from messagecenter.mutes import Mutes
from messagecenter.readmodel import InboxEntry, publish, to_ms
from messagecenter.readmodel import inbox as inbox_rm
from messagecenter.readmodel import notifications as notifications_rm
from messagecenter.readmodel import responses as responses_rm
from messagecenter.readmodel.user_part import users_held

USER_GROUPS = "messagecenter.user_groups"
BULLETIN = "messagecenter.bulletin"
BULLETIN_REMOVED = "messagecenter.bulletin_removed"
ITEM_REMOVED = "messagecenter.item_removed"
MESSAGE_DETAIL = "messagecenter.message_detail"
SUBSCRIBERS = "messagecenter.subscribers"
USER_MUTES = "messagecenter.user_mutes"

ITEM_PLACE = "messagecenter.item_place"
RESPONSES = "messagecenter.responses"


@dataclass(frozen=True)
class BulletinState:
    """A bulletin's whole state as its creating service wrote it."""

    entry: InboxEntry
    detail: dict[str, Any]
    group_ids: tuple[int, ...]
    # When it was created (ms): a bulletin backdated to show at once still
    # arrives now, which the mute rule needs (messagecenter.mutes).
    arrived_ms: int = 0


def _entry_key(entry: InboxEntry) -> tuple[Any, ...]:
    return (entry.ref, entry.category, entry.month, entry.offset, entry.score, entry.expire_ms)


def _entry_of(key: Sequence[Any]) -> InboxEntry:
    ref, category, month, offset, score, expire_ms = key
    return InboxEntry(str(ref), str(category), int(month), int(offset), int(score), int(expire_ms))


# --- now: idempotent writes from PostgreSQL's state ------------------------------------


def user_group_ids(user_ids: Iterable[int]) -> dict[int, list[int]]:
    """Each user's group ids, as their membership rows say (none: an empty list)."""
    groups: dict[int, list[int]] = {int(u): [] for u in user_ids}
    if groups:
        # mc_membership_user_idx serves this lookup by user.
        rows = UserGroupMembership.objects.filter(user_id__in=list(groups)).values_list("user_id", "group_id")
        for user_id, group_id in rows:
            groups[user_id].append(group_id)
    return groups


def held(user_ids: Iterable[int]) -> list[int]:
    """The users whose part Redis holds or is filling (all of them with healing off).
    A change of a part nobody holds is work and memory for nothing: the user's
    next read fills it from PostgreSQL, which has the change."""
    ids = [int(u) for u in user_ids]
    if not healing.enabled() or not ids:
        return ids
    return sorted(users_held(user_ids=ids))


def user_groups(user_ids: Iterable[int]) -> None:
    """Replace the group sets of the users whose part Redis holds with their
    membership rows (none: an empty set)."""
    groups = user_group_ids(held(user_ids))
    if not groups:
        return
    # The users' archived and snoozed bulletins (their rows; mc_item_state_unique
    # serves this lookup by user) leave with the rest, and those their groups
    # still show go back where the rows say.
    parked = list(
        InboxItemState.objects.filter(user_id__in=list(groups), item_id__startswith="b")
        .order_by("user_id")
        .values_list("user_id", "item_id")
    )
    now = timezone.now()
    entries = item_entries({ref for _user, ref in parked}, now)
    parked_by_user: dict[int, list[str]] = {}
    for user_id, ref in parked:
        if (entry := entries[ref]) is not None:
            parked_by_user.setdefault(user_id, []).append(entry.member)
    publish.user_groups_replace(groups_by_user=groups, now_ms=to_ms(now), parked_by_user=parked_by_user)
    refs_by_user: dict[int, list[str]] = {}
    for user_id, ref in parked:
        refs_by_user.setdefault(user_id, []).append(ref)
    item_places_put(refs_by_user, entries=entries)


def user_mutes(user_ids: Iterable[int]) -> None:
    """Replace the mute periods of the users whose part Redis holds with their
    ``MutePeriod`` rows (none: no key)."""
    rows: dict[int, list[tuple[str, int | None, int, int | None]]] = {u: [] for u in held(user_ids)}
    if not rows:
        return
    # mc_muteperiod_user_idx serves this lookup by user.
    for user_id, category, type_id, start_ms, end_ms in MutePeriod.objects.filter(user_id__in=list(rows)).values_list(
        "user_id", "category", "message_type_id", "start_ms", "end_ms"
    ):
        rows[user_id].append((category, type_id, start_ms, end_ms))
    mutes = {u: Mutes.of(r) for u, r in rows.items()}
    publish.user_mutes_replace(mutes_by_user={u: m.dumps() for u, m in mutes.items()})


def _bulletin_put(bulletin_id: int, state: BulletinState, *, edit: bool, tell: bool = True) -> bool:
    """Write it; False when an edit changed only what it says (no inbox takes it in again)."""
    moved = publish.bulletin_put(
        bulletin_id=bulletin_id,
        entry=state.entry,
        detail=state.detail,
        group_ids=list(state.group_ids),
        now_ms=to_ms(timezone.now()),
        edit=edit,
        arrived_ms=state.arrived_ms,
    )
    if tell:
        # Open pages hear of it at its display time: now, or from the due
        # zset when that time comes (an edit moves the one waiting event).
        live.broadcast(scope=live.BROADCAST_EVERYONE, reason="bulletin", ref=state.entry.ref, at_ms=state.entry.score)
    return bool(moved)


def bulletin_state(bulletin: Bulletin, *, group_ids: Iterable[int]) -> BulletinState:
    return BulletinState(
        entry=bulletin_entry(bulletin),
        detail=bulletin_detail(bulletin),
        group_ids=tuple(int(g) for g in group_ids),
        arrived_ms=to_ms(bulletin.created_at),
    )


def bulletins(bulletin_ids: Iterable[int], *, edit: bool = True) -> None:
    """Write the bulletins' config and detail as PostgreSQL holds them (gone: nothing).

    An edit also makes every inbox that merged a bulletin settle and merge it
    again; ``edit=False`` (the rebuild) only writes.
    """
    wanted = [int(b) for b in bulletin_ids]
    if not wanted:
        return
    groups: dict[int, list[int]] = {b: [] for b in wanted}
    for bulletin_id, group_id in Bulletin.groups.through.objects.filter(bulletin_id__in=wanted).values_list(
        "bulletin_id", "usergroup_id"
    ):
        groups[bulletin_id].append(group_id)
    moved = []
    for bulletin in Bulletin.objects.filter(pk__in=wanted).select_related("created_by").order_by("pk"):
        # The rebuild (edit=False) writes what pages already showed: no event.
        state = bulletin_state(bulletin, group_ids=sorted(groups[bulletin.pk]))
        if _bulletin_put(bulletin.pk, state, edit=edit, tell=edit) and edit:
            moved.append(bulletin.ref)
    if moved:
        # An edit of its times or groups takes the bulletin out of every
        # inbox, archived and snoozed places too: the users who had one get
        # it back where their rows say (if their groups still show it).
        # (mc_item_state_item_idx serves this lookup by item.)
        item_places(
            InboxItemState.objects.filter(item_id__in=moved).order_by("user_id").values_list("user_id", "item_id")
        )


def bulletin_removed(bulletin_id: int, entry: InboxEntry) -> None:
    """A deleted bulletin leaves its config, its detail and (on their next read) every inbox."""
    publish.bulletin_delete(bulletin_id=int(bulletin_id), entry=entry, now_ms=to_ms(timezone.now()))
    live.broadcast_cancel(scope=live.BROADCAST_EVERYONE, reason="bulletin", ref=entry.ref)
    live.broadcast(scope=live.BROADCAST_EVERYONE, reason="remove", ref=entry.ref)


def item_removed(entry: InboxEntry, pull_member: str = "") -> None:
    """A retracted, withdrawn or deleted item leaves every inbox at once (settled on read)."""
    publish.item_remove(entry=entry, pull_member=pull_member)


def message_details(message_ids: Iterable[int]) -> None:
    """Refresh what inboxes show of delivered messages (queued, retracted or expired: nothing)."""
    live = (
        Message.objects.filter(pk__in=[int(m) for m in message_ids])
        .exclude(
            status__in=[
                MessageStatus.SCHEDULED,
                MessageStatus.CANCELLED,
                MessageStatus.QUEUED,
                MessageStatus.RETRACTED,
                MessageStatus.EXPIRED,
            ]
        )
        .defer("audience_bitmap", "users_bitmap")  # a detail never needs the audience
        .select_related("sender")
    )
    publish.item_details_put(details_of_messages(list(live)).items())


def items_purged(
    *,
    refs: list[str],
    members: list[str],
    holders: list[int],
    pull_members: list[str],
    audience_chunks: dict[str, list[int]],
    hidden: list[tuple[int, str]],
    now: datetime,
) -> None:
    """Items past retention are about to leave PostgreSQL: their holders'
    inboxes drop them (they expired long ago, so settling at ``now`` removes
    them), then everything stored once about them and the hidden entries
    naming them. Runs before the rows are deleted, not after commit: a Redis
    failure then stops the purge (beat tries again) instead of leaving Redis
    naming rows that are gone; every step is idempotent."""
    inbox_rm.inbox_settle(user_ids=holders, now_ms=to_ms(now))
    publish.items_purge(
        refs=refs, members=members, pull_members=pull_members, audience_chunks=audience_chunks, hidden=hidden
    )


def subscribers(message_type_id: int, scope: str) -> None:
    """Replace the Redis subscriber set of one (type, scope) with PostgreSQL's."""
    rows = Subscription.objects.filter(message_type_id=message_type_id, scope=scope)
    notifications_rm.subscribers_replace(
        message_type_id=message_type_id, scope=scope, members=[s.subscriber for s in rows]
    )


def item_entries(refs: Iterable[str], now: datetime) -> dict[str, InboxEntry | None]:
    """Each ref's entry if the item is live (not retracted, withdrawn, deleted
    or expired), else None: one query per kind of item."""
    wanted: dict[str, list[int]] = {"m": [], "b": [], "n": []}
    found: dict[str, InboxEntry | None] = {}
    for ref in refs:
        found[ref] = None
        if ref[:1] in wanted and ref[1:].isdigit():
            wanted[ref[:1]].append(int(ref[1:]))
    entries: list[InboxEntry] = []
    if wanted["m"]:
        messages = Message.objects.filter(pk__in=wanted["m"]).exclude(status=MessageStatus.RETRACTED)
        entries += [message_entry(m) for m in messages.defer("audience_bitmap", "users_bitmap")]
    if wanted["b"]:
        entries += [bulletin_entry(b) for b in Bulletin.objects.filter(pk__in=wanted["b"])]
    if wanted["n"]:
        entries += [notification_entry(n) for n in Notification.objects.filter(pk__in=wanted["n"], withdrawn=False)]
    now_ms = to_ms(now)
    for entry in entries:
        if entry.ref in found and not (entry.expire_ms and entry.expire_ms <= now_ms):
            found[entry.ref] = entry
    return found


def item_place_of(state: InboxItemState | None, entry: InboxEntry, now: datetime) -> tuple[str, int]:
    """Where a state row puts the item, and its score there: archived at its
    place, snoozed until its wake time, else in the list (at the wake time
    once a snooze has woken). The fallback reads rows by the same rule."""
    if state is None:
        return inbox_rm.LIVE, entry.score
    score = to_ms(state.snoozed_until) if state.snoozed_until is not None else entry.score
    if state.archived:
        return inbox_rm.ARCHIVED, score
    if state.snoozed_until is not None and score > to_ms(now):
        return inbox_rm.SNOOZED, score
    return inbox_rm.LIVE, score


# Users placed per round: each round looks up its items, rows and groups at once.
PLACE_ROUND_USERS = 500


def item_places(pairs: Iterable[Sequence[Any]], *, entries: Mapping[str, InboxEntry | None] | None = None) -> None:
    """Put each (user id, ref) where its ``InboxItemState`` row says (no row:
    in the list), reloading from PostgreSQL; idempotent; only in the parts
    Redis holds (the others' next fill reads the rows). Items gone, deleted
    by the user, or bulletins the user's groups do not show are left alone
    (the removal, hide and membership paths own those). A bulletin whose
    display time is still ahead is only freed in Redis: the merge lists it
    when that time comes. ``entries``: the refs' ``item_entries`` when the
    caller has them already."""
    by_user: dict[int, dict[str, None]] = {}
    for user_id, ref in pairs:
        by_user.setdefault(int(user_id), {})[str(ref)] = None
    item_places_put({u: list(by_user[u]) for u in held(by_user)}, entries=entries)


def item_places_put(
    refs_by_user: Mapping[int, Sequence[str]], *, entries: Mapping[str, InboxEntry | None] | None = None
) -> None:
    """``item_places`` for users whose parts the caller knows Redis holds (a
    fill holding its user's lock, a membership change that asked already)."""
    now = timezone.now()
    users = list(refs_by_user)
    for start in range(0, len(users), PLACE_ROUND_USERS):
        _place_round({u: list(refs_by_user[u]) for u in users[start : start + PLACE_ROUND_USERS]}, now, entries)


def _place_round(
    refs_by_user: dict[int, list[str]], now: datetime, known: Mapping[str, InboxEntry | None] | None
) -> None:
    user_ids = list(refs_by_user)
    refs = {ref for user_refs in refs_by_user.values() for ref in user_refs}
    hidden = set(InboxHidden.objects.filter(user_id__in=user_ids, item_id__in=refs).values_list("user_id", "item_id"))
    states = {(s.user_id, s.item_id): s for s in InboxItemState.objects.filter(user_id__in=user_ids, item_id__in=refs)}
    entries = known if known is not None else item_entries(refs, now)
    shown = _bulletin_viewers([e for e in entries.values() if e is not None and e.ref[:1] == "b"], user_ids)
    now_ms = to_ms(now)
    for user_id, user_refs in refs_by_user.items():
        places = []
        for ref in user_refs:
            entry = entries[ref]
            if entry is None or (user_id, ref) in hidden or (ref in shown and user_id not in shown[ref]):
                continue
            if entry.score > now_ms:  # a bulletin not displayed yet
                places.append((entry, inbox_rm.LIVE, entry.score))
            else:
                places.append((entry, *item_place_of(states.get((user_id, ref)), entry, now)))
        inbox_rm.inbox_items_place(user_id=user_id, places=places, now_ms=now_ms)


def _bulletin_viewers(entries: Sequence[InboxEntry], user_ids: Sequence[int]) -> dict[str, set[int]]:
    """ref -> which of these users a bulletin shown to some groups reaches
    (one of their groups is among its groups); bulletins for everyone are
    not named. The fallback reads memberships by the same rule."""
    groups_of: dict[str, set[int]] = {}
    ids = [int(e.ref[1:]) for e in entries]
    for bulletin_id, group_id in Bulletin.groups.through.objects.filter(bulletin_id__in=ids).values_list(
        "bulletin_id", "usergroup_id"
    ):
        groups_of.setdefault(f"b{bulletin_id}", set()).add(group_id)
    if not groups_of:
        return {}
    members: dict[int, set[int]] = {}
    # mc_membership_user_idx serves this lookup by user.
    for user_id, group_id in UserGroupMembership.objects.filter(user_id__in=user_ids).values_list(
        "user_id", "group_id"
    ):
        members.setdefault(group_id, set()).add(user_id)
    return {ref: set().union(*(members.get(g, set()) for g in groups)) for ref, groups in groups_of.items()}


# --- runners: what durability.projection calls with the keys of one transaction -------------


def _run_user_groups(keys: list[Any], facts: Mapping[Any, Any]) -> None:
    user_groups(keys)


def _run_user_mutes(keys: list[Any], facts: Mapping[Any, Any]) -> None:
    user_mutes(keys)


def _run_bulletins(keys: list[Any], facts: Mapping[Any, Any]) -> None:
    # Known (just created, unchanged since): written as given, not as an edit.
    for bulletin_id in keys:
        if bulletin_id in facts:
            _bulletin_put(int(bulletin_id), facts[bulletin_id], edit=False)
    bulletins([b for b in keys if b not in facts])


def _run_bulletins_removed(keys: list[Any], facts: Mapping[Any, Any]) -> None:
    for bulletin_id, *entry in keys:
        bulletin_removed(int(bulletin_id), _entry_of(entry))


def _run_items_removed(keys: list[Any], facts: Mapping[Any, Any]) -> None:
    for *entry, pull_member in keys:
        item_removed(_entry_of(entry), str(pull_member))


def _run_message_details(keys: list[Any], facts: Mapping[Any, Any]) -> None:
    message_details(keys)


def _run_subscribers(keys: list[Any], facts: Mapping[Any, Any]) -> None:
    for message_type_id, scope in keys:
        subscribers(int(message_type_id), str(scope))


def _run_item_places(keys: list[Any], facts: Mapping[Any, Any]) -> None:
    item_places(keys)


def _run_responses(keys: list[Any], facts: Mapping[Any, Any]) -> None:
    responses(keys)


def responses(pairs: Sequence[tuple[int, int]]) -> None:
    """Mirror the answers of these (user, message) pairs into the answer set
    of each user whose part Redis holds (reloaded: the row is the truth). The answer to a message
    no longer in any inbox (retracted, expired) leaves the hash: it would only
    take room there, and the operator reads answers from PostgreSQL."""
    by_user: dict[int, set[int]] = {}
    for user_id, message_id in pairs:
        by_user.setdefault(int(user_id), set()).add(int(message_id))
    now = timezone.now()
    for user_id in held(by_user):
        message_ids = by_user[user_id]
        found = live_answers(now, user_id=user_id, message_ids=sorted(message_ids))
        responses_rm.responses_put(user_id=user_id, responses=found)
        responses_rm.responses_drop(user_id=user_id, refs=[f"m{m}" for m in message_ids if f"m{m}" not in found])


def live_answers(
    now: datetime, *, user_id: int, message_ids: Sequence[int] | None = None
) -> dict[str, tuple[int, int]]:
    """The user's answers to messages still in inboxes (delivered, not expired
    by ``now``; all of them, or of these messages) as Redis keeps them:
    ``{ref: (index of the action among the message's, at ms)}``."""
    rows = MessageResponse.objects.filter(
        user_id=user_id, message__status__in=[MessageStatus.DELIVERING, MessageStatus.DELIVERED]
    ).exclude(message__expire_at__lte=now)
    if message_ids is not None:
        rows = rows.filter(message_id__in=message_ids)
    return {
        f"m{m}": (responses_rm.action_index(actions, action), to_ms(at))
        for m, action, at, actions in rows.values_list("message_id", "action", "at", "message__actions")
    }


# A run Redis refused is kept in the outbox under ``messagecenter.mirror``, one
# entry ``{"name", "args"}`` per write, and ``replay_mirror`` runs it again.
MIRROR_TOPIC = "messagecenter.mirror"


def _mirror(name: str, *args: Any) -> dict[str, Any]:
    return {"name": name, "args": list(args)}


PAYLOADS: dict[str, projection.Payloads] = {
    USER_GROUPS: lambda keys, facts: [_mirror("user_groups", [int(u) for u in keys])],
    BULLETIN: lambda keys, facts: [_mirror("bulletin", b, b not in facts) for b in keys],
    BULLETIN_REMOVED: lambda keys, facts: [_mirror("bulletin_delete", k[0], list(k[1:])) for k in keys],
    ITEM_REMOVED: lambda keys, facts: [_mirror("remove_item", list(k[:-1]), k[-1]) for k in keys],
    MESSAGE_DETAIL: lambda keys, facts: [_mirror("message_detail", m) for m in keys],
    SUBSCRIBERS: lambda keys, facts: [_mirror("subscribers", t, s) for t, s in keys],
    USER_MUTES: lambda keys, facts: [_mirror("user_mutes", [int(u) for u in keys])],
    ITEM_PLACE: lambda keys, facts: [_mirror("item_place", int(u), str(r)) for u, r in keys],
    RESPONSES: lambda keys, facts: [_mirror("responses", [[int(u), int(m)] for u, m in keys])],
}

RUNNERS: dict[str, projection.Runner] = {
    USER_GROUPS: _run_user_groups,
    BULLETIN: _run_bulletins,
    BULLETIN_REMOVED: _run_bulletins_removed,
    ITEM_REMOVED: _run_items_removed,
    MESSAGE_DETAIL: _run_message_details,
    SUBSCRIBERS: _run_subscribers,
    USER_MUTES: _run_user_mutes,
    ITEM_PLACE: _run_item_places,
    RESPONSES: _run_responses,
}


def replay_mirror(payload: dict[str, Any], user_id: int | None) -> None:
    """Outbox handler of ``messagecenter.mirror``: the same projection, reloading (idempotent)."""
    name, args = str(payload["name"]), list(payload["args"])
    if name == "user_groups":
        user_groups(args[0])
    elif name == "bulletin":
        bulletins([args[0]], edit=bool(args[1]) if len(args) > 1 else True)
    elif name == "bulletin_delete":
        bulletin_removed(int(args[0]), _entry_of(args[1]))
    elif name == "remove_item":
        item_removed(_entry_of(args[0]), str(args[1]))
    elif name == "message_detail":
        message_details([args[0]])
    elif name == "subscribers":
        subscribers(int(args[0]), str(args[1]))
    elif name == "user_mutes":
        user_mutes(args[0])

    elif name == "item_place":
        item_places([(int(args[0]), str(args[1]))])
    elif name == "responses":
        responses([(int(u), int(m)) for u, m in args[0]])
    else:
        raise LookupError(f"unknown mirror {name!r}")


# The app's projections and the outbox handler of their failed runs (its AppConfig names both).
# The drift area that finds and mends what each projection writes, for those
# whose lost run (a process that died after its commit) no user's next read
# heals: the users' own writes are noted in their parts instead (fill.part_writing),
# and an operator's write to users' parts asks for a record of its own
# (``item_places_freed``, ``messages_answered_removed``, ``message_type_deleting``).
AREAS: dict[str, str] = {
    USER_GROUPS: "memberships",
    BULLETIN: "bulletins",
    BULLETIN_REMOVED: "bulletins",
    ITEM_REMOVED: "item_details",
    MESSAGE_DETAIL: "item_details",
    SUBSCRIBERS: "subscribers",
}

PROJECTIONS = {
    name: projection.Projection(runner=runner, topic=MIRROR_TOPIC, payloads=PAYLOADS[name], area=AREAS.get(name))
    for name, runner in RUNNERS.items()
}
OUTBOX_HANDLERS = {MIRROR_TOPIC: replay_mirror}


# --- after commit: what receivers and services ask for -----------------------------------


def user_groups_changed(user_ids: Iterable[int]) -> None:
    projection.project(USER_GROUPS, [int(u) for u in user_ids])


def bulletin_changed(bulletin_ids: Iterable[int]) -> None:
    projection.project(BULLETIN, [int(b) for b in bulletin_ids])


def bulletin_created(bulletin: Bulletin, *, group_ids: Iterable[int]) -> None:
    """``bulletin_create`` wrote this new bulletin and all of its groups: the run
    at commit writes this state instead of reloading it (unless the bulletin
    changes again in the same transaction)."""
    projection.project(BULLETIN, [bulletin.pk], facts={bulletin.pk: bulletin_state(bulletin, group_ids=group_ids)})


def bulletin_deleted(bulletin: Bulletin) -> None:
    projection.project(BULLETIN_REMOVED, [(bulletin.pk, *_entry_key(bulletin_entry(bulletin)))])


def group_deleting(group: UserGroup) -> None:
    """Before a group is deleted: its bulletins lose it in the cascade, which sends no signal."""
    bulletin_changed(group.bulletins.values_list("pk", flat=True))


def message_changed(message_id: int) -> None:
    projection.project(MESSAGE_DETAIL, [message_id])


def message_removed(message: Message) -> None:
    entry = message_entry(message)
    pull = publish.pull_member(entry, everyone=message.everyone) if message.delivery == DeliveryMode.PULL else ""
    projection.project(ITEM_REMOVED, [(*_entry_key(entry), pull)])


def notification_removed(notification: Notification) -> None:
    projection.project(ITEM_REMOVED, [(*_entry_key(notification_entry(notification)), "")])


def subscribers_changed(pairs: Iterable[tuple[int, str]]) -> None:
    projection.project(SUBSCRIBERS, [(int(t), str(s)) for t, s in pairs])


def user_mutes_changed(user_ids: Iterable[int]) -> None:
    projection.project(USER_MUTES, [int(u) for u in user_ids])


def item_place_changed(user_id: int, refs: Iterable[str]) -> None:
    """The user archived, unarchived or snoozed these items (their state rows changed)."""
    projection.project(ITEM_PLACE, [(int(user_id), str(r)) for r in refs])


def item_places_freed(pairs: Iterable[tuple[int, str]]) -> None:
    """An operator's change deleted these (user, ref) state rows (a bulletin
    moved to show later): recorded in the transaction, as no note of the
    users covers it, all pairs in one request."""
    projection.project(ITEM_PLACE, [(int(u), str(r)) for u, r in pairs], recorded=True)


def responses_changed(user_id: int, message_ids: Iterable[int]) -> None:
    """The user answered these messages' actions."""
    projection.project(RESPONSES, [(int(user_id), int(m)) for m in message_ids])


def messages_answered_removed(message_ids: Iterable[int]) -> None:
    """These messages left every inbox (retracted, expired): their answers leave
    the answerers' answer sets."""
    pairs = MessageResponse.objects.filter(message_id__in=list(message_ids)).values_list("user_id", "message_id")
    # An operator's change: recorded, as no note of the answerers covers it.
    projection.project(RESPONSES, [(int(u), int(m)) for u, m in pairs], recorded=True)


def message_type_deleting(message_type_id: int) -> None:
    """Before a message type is deleted: its mute periods go in the cascade (a
    signal per row, after this); the users who had them are asked for here,
    all at once and recorded, as no note of theirs covers an operator's delete."""
    user_ids = MutePeriod.objects.filter(message_type_id=message_type_id).values_list("user_id", flat=True)
    projection.project(USER_MUTES, sorted({int(u) for u in user_ids}), recorded=True)
