"""Every Redis key name of the messagecenter app (inbox, bulletins, messages,
notifications, channels), built on ``core.keys``.

Each function documents the type of the key it names; the tests check that keys one
Lua script touches share a hash tag (one Redis Cluster slot)."""

import hashlib
from collections.abc import Callable, Iterable, Sequence

from core.keys import GLOBAL_TAG, USER_ID_FILL, fill_lock, key, match_under, user_tag
from live.keys import user_version as live_user_version

# --- messagecenter (inbox, bulletins, messages) -------------------------------------
# (owned by messagecenter/readmodel.py)
#
# Per-user keys carry ``user_tag(user_id)`` so the inbox Lua script (every key in
# KEYS) runs on one Redis Cluster slot. Global keys carry ``GLOBAL_TAG`` so the
# global Lua script can change several of them atomically (one slot too).


def inbox(user_id: int) -> str:
    """zset: every item of the user's inbox; member ``<ref>|<category>|<month>|<offset>``.

    Score = the item's time in ms (creation, or a bulletin's display time): the
    inbox's one time axis. A page cursor (time_max, skip), ``since`` and the
    seen watermark (``inbox_state`` "seen") are points on that axis, named
    as such in the read model and its scripts; nothing else is kept in it."""
    return key("inbox", user_tag(user_id), "all")


def inbox_category(user_id: int, category: str) -> str:
    """zset: the user's items of one category (same members and scores as ``inbox``)."""
    return key("inbox", user_tag(user_id), "cat", category)


def inbox_counters(user_id: int) -> str:
    """hash: category -> number of live unread items (kept exact by the inbox scripts, messagecenter/lua/)."""
    return key("inbox", user_tag(user_id), "unread")


def inbox_unread(user_id: int, category: str = "") -> str:
    """zset: the user's live items whose read bit is 0, all of them ("" category) or one
    category's (same members and scores as ``inbox`` / ``inbox_category``); an unread-only
    page is a plain range of it. ZCARD of a category's zset = that category's counter in
    ``inbox_counters`` (kept exact by the inbox scripts, checked by the drift check)."""
    return key("inbox", user_tag(user_id), "unread_z", category or "all")


def inbox_evicted(user_id: int) -> str:
    """set: placed members that left ``inbox`` in a fan-out (cap or expiry) whose category
    and unread zsets, counter, push bit and expiry entry still hold them (the fan-out holds
    none of those keys); the next inbox script finishes their removal, a bounded number per
    call."""
    return key("inbox", user_tag(user_id), "evicted")


def inbox_arrivals(user_id: int) -> str:
    """zset: members a fan-out added to ``inbox`` (with their expiry entry and month) whose
    other places (category zset, push bit, unread zsets and counter) the user's next inbox
    script gives them, a bounded number per call; score = the item's time (+inf: waiting for
    a call that passes its month's bitmaps)."""
    return key("inbox", user_tag(user_id), "arrivals")


def inbox_hidden(user_id: int) -> str:
    """set: refs (``m12``, ``b3``) the user deleted from the inbox; never merged back."""
    return key("inbox", user_tag(user_id), "hidden")


def inbox_archived(user_id: int) -> str:
    """zset: members the user archived, score = the item's time in the list (ms)."""
    return key("inbox", user_tag(user_id), "archived")


def inbox_snoozed(user_id: int) -> str:
    """zset: members the user snoozed, score = the wake time (ms); woken on read."""
    return key("inbox", user_tag(user_id), "snoozed")


def inbox_expiry(user_id: int) -> str:
    """zset: inbox members that expire, score = expire_at in ms (settled on every read)."""
    return key("inbox", user_tag(user_id), "expiry")


def inbox_months(user_id: int) -> str:
    """set: months (``yyyymm``) for which the user has push/read bitmaps."""
    return key("inbox", user_tag(user_id), "months")


def inbox_state(user_id: int) -> str:
    """hash: ``seen`` watermark (a time on ``inbox``'s score axis, ms), ``settled`` removal
    version, ``pull`` sequence, ``bd`` bulletin display marker (display time, ms, of the latest
    bulletin merged into the inbox: a due bulletin displayed later still needs merging), ``rev``
    (moves with any change to the user's keys), ``fill`` (the generation the part was filled
    for), ``w`` and ``w:<token>`` (the user's writes in flight: how many, and each one's start, ms)."""
    return key("inbox", user_tag(user_id), "state")


def inbox_groups(user_id: int) -> str:
    """hash: ref of a grouped item's row -> JSON ``{key, count, seen, start, exp}`` of its group
    (the row's count, its last three distinct actors, the time of the group's first item,
    the earliest expiry among its items)."""
    return key("inbox", user_tag(user_id), "groups")


def inbox_groups_open(user_id: int) -> str:
    """hash: group key -> the member of its open group's row (open while that row is unread and
    listed; reading, archiving or deleting it ends the group)."""
    return key("inbox", user_tag(user_id), "groups", "open")


def inbox_groups_closed(user_id: int) -> str:
    """hash: ``"<end>|<row ref>|<group key>"`` -> the member of an ended group's row (end: the
    time, ms, the group ended at, its row's time then; row ref: that row's; see ``inbox_group_ends``)."""
    return key("inbox", user_tag(user_id), "groups", "closed")


def inbox_group_ends(user_id: int, group_key: str) -> str:
    """zset: the times (ms) the user's groups of one key ended at, member ``"<time>|<row ref>|"``
    (the row's ref then), score = the time; they cut the key's items into groups
    (messagecenter/lua/_group.lua). Mirror of ``InboxGroupEnd``."""
    return inbox_group(user_id, group_key) + ":ends"


def inbox_group(user_id: int, group_key: str) -> str:
    """zset: the user's items of one group key, score = the item's time (``?group_key=``).

    The key names the group key by a digest: any text fits, and no key name
    carries what an operator typed."""
    digest = hashlib.sha1(group_key.encode(), usedforsecurity=False).hexdigest()[:20]
    return key("inbox", user_tag(user_id), "group", digest)


def user_groups(user_id: int) -> str:
    """set: ids of the user's groups (mirror of PostgreSQL memberships)."""
    return key("user", "groups", user_tag(user_id))


def user_mutes(user_id: int) -> str:
    """string: JSON of the user's mute periods (mirror of PostgreSQL), read by the merge on read."""
    return key("user", "mutes", user_tag(user_id))


def push_bitmap(user_id: int, month: int | str) -> str:
    """bitmap: bit = item offset within ``month``; 1 = pushed to the user (the item is readable by them)."""
    return key("message", "push", user_tag(user_id), month)


def read_bitmap(user_id: int, month: int | str) -> str:
    """bitmap: bit = item offset within ``month``; 1 = the user has read the item."""
    return key("message", "read", user_tag(user_id), month)


def read_ever_bitmap(user_id: int, month: int | str) -> str:
    """bitmap: bit = item offset within ``month``; 1 = the user has read the item at least once
    (never cleared by "unread"; tells first reads apart for the per-item read counters)."""
    return key("message", "read", "ever", user_tag(user_id), month)


def inbox_pages(user_id: int) -> str:
    """hash, the user's read cache: query ("<category>|<unread only>|<limit>") -> the API's
    rendered first page (JSON), "counts" -> the unread counters and unseen count, and each
    field + "#" -> "<tag>|<valid until ms>"; served while the tag is current (the inbox scripts'
    "Read cache"; a cache with a short lifetime: only users polling now hold one)."""
    return key("inbox", user_tag(user_id), "pages")


def inbox_answers(user_id: int) -> str:
    """zset: message ref -> at ms x 4 + the chosen action's index, the user's answers to items'
    actions (mirror of PostgreSQL's responses; messagecenter/readmodel/responses.py): a page
    shows them without SQL."""
    return key("inbox", user_tag(user_id), "answers")


def inbox_scratch(user_id: int) -> str:
    """bitmap, transient: read_all.lua's work space within one call ("read all"
    computes each month's first reads there); deleted before the call ends."""
    return key("inbox", user_tag(user_id), "scratch")


def user_part(
    user_id: int, *, categories: Sequence[str], months: Iterable[str], group_keys: Iterable[str]
) -> list[str]:
    """Every key of the user's own part of the read model (a cache of PostgreSQL,
    messagecenter/fill.py): the fixed ones, those of the categories, months and
    group keys given. All carry the user's hash tag: one slot."""
    names = [
        *(inbox(user_id), inbox_counters(user_id), inbox_evicted(user_id), inbox_arrivals(user_id)),
        *(inbox_category(user_id, c) for c in categories),
        inbox_unread(user_id),
        *(inbox_unread(user_id, c) for c in categories),
        *(inbox_hidden(user_id), inbox_archived(user_id), inbox_snoozed(user_id), inbox_expiry(user_id)),
        *(inbox_months(user_id), inbox_state(user_id), inbox_pages(user_id), inbox_answers(user_id)),
        *(inbox_groups(user_id), inbox_groups_open(user_id), inbox_groups_closed(user_id)),
        *(user_groups(user_id), user_mutes(user_id), user_notifications(user_id), bulletin_access_time(user_id)),
    ]
    for month in months:
        names += [push_bitmap(user_id, month), read_bitmap(user_id, month), read_ever_bitmap(user_id, month)]
    for group_key in group_keys:
        names += [inbox_group(user_id, group_key), inbox_group_ends(user_id, group_key)]
    return names


def filled_users() -> str:
    """set: ids of users whose part of the read model was filled (messagecenter/fill.py): what
    the idle job walks to drop the rest of a part whose state hash expired or was evicted."""
    return key("inbox", "filled", GLOBAL_TAG)


def deliver_key_templates(
    *, notifications: bool = False, expiry: bool = True, group_key: str = "", held_only: bool = False
) -> list[str]:
    """One recipient's stride of ``deliver_keys`` with ``USER_ID_FILL`` for its id:
    the named functions' own names, for a stand-in id whose tag becomes the fill."""
    stand_in = 0
    tag, fill_tag = user_tag(stand_in), "{u" + USER_ID_FILL + "}"
    namers: list[Callable[[int], str]] = [inbox, inbox_hidden, inbox_arrivals]
    if expiry:
        namers.append(inbox_expiry)
    namers += [inbox_months, live_user_version, inbox_evicted]
    if notifications:
        namers.append(user_notifications)
    if held_only:
        namers += [inbox_state, lambda u: fill_lock(inbox_state(u))]
    if group_key:
        namers += [
            inbox_groups,
            inbox_groups_open,
            inbox_groups_closed,
            lambda u: inbox_group(u, group_key),
            lambda u: inbox_group_ends(u, group_key),
        ]
    # The tag is the only place an id appears in these names.
    return [namer(stand_in).replace(tag, fill_tag) for namer in namers]


def deliver_keys(
    user_ids: Iterable[int],
    *,
    notifications: bool = False,
    expiry: bool = True,
    group_key: str = "",
    held_only: bool = False,
) -> list[str]:
    """The KEYS of messagecenter/lua/deliver.lua for these recipients, one stride per
    recipient in its order: ``inbox``, ``inbox_hidden``, ``inbox_arrivals``,
    ``inbox_expiry`` (only with ``expiry``: an item that never expires leaves that zset
    alone), ``inbox_months``, ``live_user_version``, ``inbox_evicted`` and, with
    ``notifications``, ``user_notifications``, with ``held_only`` (only the parts
    Redis holds are written) ``inbox_state`` and its fill lock, and with a ``group_key`` the recipient's
    ``inbox_groups``, ``inbox_groups_open``, ``inbox_groups_closed``, ``inbox_group``
    and ``inbox_group_ends``: the few keys an item's
    arrival writes (the recipient's next read places it: its category zset, bitmaps and counters).

    The same names as those functions (a test holds them equal), filled into
    one template per call: a fan-out builds them for every recipient, and a
    function call per key cost more than the Redis work itself. (On a single
    Redis the fan-out packs the templates straight into the protocol instead:
    core.lua.pack_filled.)
    """
    names = deliver_key_templates(notifications=notifications, expiry=expiry, group_key=group_key, held_only=held_only)
    # NUL occurs in no key name: one join, a replace per recipient, one split.
    template = "\x00".join(names)
    joined = "\x00".join(template.replace(USER_ID_FILL, str(int(u))) for u in user_ids)
    return joined.split("\x00") if joined else []


def bulletin_access_time(user_id: int) -> str:
    """string: bulletin update marker the user's list last took in."""
    return key("bulletin", "access", "time", user_tag(user_id))


def bulletin_config() -> str:
    """zset: member ``<bulletin_id>_<usergroup_id>`` (0 = everyone), score = display time ms."""
    return key("bulletin_notification_config", GLOBAL_TAG)


def bulletin_detail() -> str:
    """hash: field ``<bulletin_id>_<usergroup_id>`` -> bulletin JSON."""
    return key("bulletin_notification_detail", GLOBAL_TAG)


def bulletin_members() -> str:
    """hash: bulletin id -> comma-separated config members (to drop them on edit/delete)."""
    return key("bulletin", "members", GLOBAL_TAG)


def bulletin_update_time() -> str:
    """string: strictly increasing ms marker of the last bulletin change."""
    return key("bulletin", "update", "time", GLOBAL_TAG)


def bulletin_changes() -> str:
    """zset: the bulletin change log. Member = a live config member (``<bulletin>_<group>``),
    score = the update marker of its last change; a read takes in the members above the
    user's access time. Holds exactly the config zset's members (dropped with them)."""
    return key("bulletin", "changes", GLOBAL_TAG)


def bulletin_changes_floor() -> str:
    """string: the update marker from which the change log is complete; a user whose
    access time is below it (or when it is missing) merges every live bulletin once."""
    return key("bulletin", "changes", "floor", GLOBAL_TAG)


def item_detail() -> str:
    """hash: item ref (``m12``, ``b3``) -> item JSON (title, body, images, ...)."""
    return key("inbox", "detail", GLOBAL_TAG)


def item_detail_version() -> str:
    """string: counter the global write scripts bump when an item detail is
    written over (an edit changes what pages show)."""
    return key("inbox", "detail", "version", GLOBAL_TAG)


def removed() -> str:
    """zset: inbox members removed everywhere (retracted, edited, deleted), score = removal version."""
    return key("inbox", "removed", GLOBAL_TAG)


def removed_version() -> str:
    """string: counter of removals; a user whose settled version is lower settles on read."""
    return key("inbox", "removed", "version", GLOBAL_TAG)


def removed_floor() -> str:
    """string: highest removal version trimmed away; users settled below it re-check their whole inbox."""
    return key("inbox", "removed", "floor", GLOBAL_TAG)


def pull() -> str:
    """zset: live pull items, member ``<inbox member>|<created ms>|<expire ms>|<audience>``, score = sequence."""
    return key("inbox", "pull", GLOBAL_TAG)


def pull_sequence() -> str:
    """string: counter of pull registrations (users merge the range above their watermark)."""
    return key("inbox", "pull", "seq", GLOBAL_TAG)


def pull_audience(ref: str, chunk: int) -> str:
    """bitmap: bit = user id - chunk base; the send-time audience of a pull item (one key per id chunk)."""
    return key("inbox", "audience", ref, chunk)


def item_read_hours(ref: str) -> str:
    """hash: hour (ms since the epoch // 3,600,000) -> users who first read the item (``m12``,
    ``b3``) in that hour (0 -> 1 transitions of their read bit; the admin's read-rate chart).
    Global, one key per item: written from Python after the inbox scripts, never by a script."""
    return key("inbox", "reads", ref)


def first_reads_pending() -> str:
    """list: first reads not yet added to the per-item hour hashes, one entry
    ``<hour>|<ref>,<ref>,...`` per mark, or ``<hour>|@<month>|<bitmap>`` (the
    month's item offsets first read, binary: a "read all" of everything) per
    month of a mark (write-behind: a "read all" of 10,000 items costs one
    RPUSH, not two commands per item); folded by
    ``messagecenter.readmodel.reads.first_reads_fold`` before every chart read
    and by a beat job."""
    return key("inbox", "reads", "pending")


# --- messagecenter: subscriptions and notifications ---------------------------------
# (owned by messagecenter/readmodel/notifications.py)
#
# A notification reaches a user's inbox through ``inbox`` like any item
# (kind ``notification``, ref ``n<id>``): that zset, scored by creation time,
# is the per-subscriber list clients poll with ``since``. Beside it each
# user has ``user_notifications``, scored by expiry, which the sweep trims
# with ZREMRANGEBYSCORE; it shares the user's hash tag so the inbox script
# can trim it together with the inbox. ``notification_holders`` is the
# index the sweep walks (SSCAN): the users who may hold notifications.


def subscribers(message_type_id: int, scope: str) -> str:
    """set: ``u<id>`` / ``g<id>`` subscribed to a message type in a scope (a warehouse, ...);
    a mirror of PostgreSQL."""
    return key("sub", "type", int(message_type_id), scope)


def subscribers_match() -> str:
    """SCAN MATCH pattern (glob) of every ``subscribers`` set: the drift check walks them
    to find sets of a (type, scope) that PostgreSQL no longer has subscribers for."""
    return match_under(key("sub", "type", ""))


def subscribers_parse(name: str) -> tuple[int, str] | None:
    """(message type id, scope) named by an ``subscribers`` key; None for any other key."""
    head = key("sub", "type", "")
    if not name.startswith(head):
        return None
    type_id, sep, scope = name[len(head) :].partition(":")
    if not sep or not type_id.isdigit():
        return None
    return int(type_id), scope


def user_notifications(user_id: int) -> str:
    """zset: inbox members of the user's notifications, score = expire_at in ms (swept)."""
    return key("inbox", user_tag(user_id), "notif")


def notification_holders() -> str:
    """set: ids of users whose ``user_notifications`` may be non-empty (walked by the sweep)."""
    return key("notification", "holders")


def channel_sends(user_id: int, hour: int) -> str:
    """string: how many pushes and e-mails (beyond the inbox) the user was sent in ``hour``
    (hours since the epoch, UTC); the cap's counter (messagecenter/readmodel/channels.py).
    Expires two hours after it is made."""
    return key("channel", "sends", user_tag(user_id), hour)


def user_language(user_id: int) -> str:
    """string: a read-through entry (core/readthrough.py) of the user's chosen content
    language ("" when none chosen; messagecenter/languages.py)."""
    return key("user", "language", user_tag(user_id))
