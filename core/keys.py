"""Every Redis key name of the project is built here, and nowhere else.

Names keep the shapes the design started from (``notice:<platform>:<id>``,
``bulletin:update:time``, ...; see docs/ARCHITECTURE.md), preceded by
``settings.MESSAGECENTER_KEY_PREFIX``. Keys that one Lua script touches share
a hash tag (the part in braces) so that they map to one slot on Redis Cluster;
the tests check that with ``redis.cluster.key_slot``.
Each function documents the type of the key it names.
"""

import hashlib
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

# Key names are built on every hot-path call (a fan-out builds about a dozen
# per recipient): the prefix is read from settings once, not per key.
_prefix: str | None = None


@receiver(setting_changed, dispatch_uid="core_keys_prefix")
def _prefix_changed(*, setting: str, **kwargs: Any) -> None:
    global _prefix
    if setting == "MESSAGECENTER_KEY_PREFIX":
        _prefix = None


def prefix() -> str:
    """The prefix every key name starts with (callers memoising key lists key them by it)."""
    global _prefix
    if _prefix is None:
        _prefix = str(settings.MESSAGECENTER_KEY_PREFIX)
    return _prefix


def _key(*parts: object) -> str:
    return prefix() + ":".join(map(str, parts))


def user_tag(user_id: int) -> str:
    """Hash tag shared by every per-user key, so one script can touch them all."""
    return f"{{u{int(user_id)}}}"


# --- core -----------------------------------------------------------------------


def user_platforms(user_id: int) -> str:
    """string: a read-through entry (core/readthrough.py) of the user's platform codes."""
    return _key("user", "platforms", user_tag(user_id))


def user_language(user_id: int) -> str:
    """string: a read-through entry (core/readthrough.py) of the user's chosen content
    language ("" when none chosen)."""
    return _key("user", "language", user_tag(user_id))


def auth_token(digest: str) -> str:
    """string: a read-through entry (core/readthrough.py) of the token owner's fields and the
    token's expiry, or of the token's absence; a tombstone after a revocation or user change.
    Named by the token's digest (core/tokens.py), never the token; the digest is the hash
    tag, which the entry's fill lock (``fill_lock``) shares."""
    return _key("auth", "token", f"{{t{digest}}}")


def replica_pin(user_id: int) -> str:
    """string: present while a user's reads go to the PostgreSQL primary after a write (read-your-writes)."""
    return _key("replica", "pin", user_tag(user_id))


def auth_user(user_id: int) -> str:
    """string: a read-through entry (core/readthrough.py) of the fields authentication needs
    for a user, or of the id's absence (cache of PostgreSQL)."""
    return _key("auth", "user", user_tag(user_id))


def fill_lock(entry_key: str) -> str:
    """string: the fill lock of a read-through entry (core/readthrough.py): a random token
    with a short lease (SET NX PX). The entry's own name plus a suffix, so it keeps the
    entry's hash tag and one script can check the lock and write the entry."""
    return f"{entry_key}:fill"


# Activity bitmaps (core/activity.py). The user id space is cut into chunks of
# MESSAGECENTER_BITMAP_CHUNK_USERS ids and each chunk has its own hash tag: every
# BITOP (a week's union, a retention intersection) meets days of one chunk only,
# so it runs on one Redis Cluster slot, while the chunks (and a year of days of a
# large user base) spread over the masters. One tag for all activity keys would
# also work for BITOP, but would put every day of every user on one node.


def activity_tag(chunk: int) -> str:
    return f"{{a{int(chunk)}}}"


def activity_day(chunk: int, day: str) -> str:
    """bitmap: bit = user id minus the chunk's first id; 1 = the user was active on
    ``day`` (``yyyymmdd``, UTC). Expires after MESSAGECENTER_ACTIVITY_KEEP_DAYS."""
    return _key("activity", activity_tag(chunk), "day", day)


def activity_scratch(chunk: int, nonce: str) -> str:
    """bitmap: a BITOP's result, counted and deleted in the same pipeline (short expiry
    in case the DEL is lost). Same tag as the chunk's days."""
    return _key("activity", activity_tag(chunk), "tmp", nonce)


def health_probe() -> str:
    """string: written and read by /healthz."""
    return _key("healthz")


def readmodel_generation() -> str:
    """string: the generation number of the last full rebuild that filled this Redis
    (core/healing.py; PostgreSQL keeps the same number). Missing: Redis lost its data."""
    return _key("readmodel", "generation")


# --- notices (announcements) --------------------------------------------------------
# (owned by notices/readmodel.py)
# Read bitmaps and per-user read counters are split by user-id range into chunks of
# MESSAGECENTER_NOTICE_CHUNK_USERS users. Everything one count script touches
# (a platform's chunk index, expiry zset, metadata and bitmaps) shares the
# chunk's hash tag, so it maps to one slot; different chunks and platforms
# spread over the cluster.


def notice_summary(announcement_id: int) -> str:
    """string: a read-through entry (core/readthrough.py) of what a list shows of one
    announcement (title, summary, publish time, pinned), or of its absence; a tombstone
    after any change of its row. The id is the hash tag, which the fill lock shares."""
    return _key("notice", "summary", f"{{a{int(announcement_id)}}}")


def notice_tag(platform: str, chunk: int) -> str:
    """Hash tag of one (platform, chunk): ``{user}`` for chunk 0 (the plain
    ``notice:<platform>:<id>`` shape), ``{user:1}`` for chunk 1, ..."""
    return f"{{{platform}}}" if int(chunk) == 0 else f"{{{platform}:{int(chunk)}}}"


def notice_bitmap(platform: str, chunk: int, announcement_id: int) -> str:
    """bitmap of a window of the chunk: a head saying the byte s it starts at, then bit i =
    the user with id ``chunk's first id + 8 * s + i``; 1 = read (notices/lua/_bits.lua)."""
    return _key("notice", notice_tag(platform, chunk), int(announcement_id))


def notice_read_hours(platform: str, chunk: int, announcement_id: int) -> str:
    """hash: hour (ms since the epoch // 3,600,000) -> users of the chunk who marked it read
    in that hour (0 -> 1 transitions; the admin's read-rate chart). Same tag as the bitmap."""
    return _key("notice", notice_tag(platform, chunk), int(announcement_id), "hours")


def notice_reads(platform: str, chunk: int, block: int) -> str:
    """string: byte 0 the counter width w (4, 8, 16 or 32 bits), then counter i at bit
    8 + i * w = how many announcements of the chunk index live at the chunk time (meta ``t``)
    user ``block * NOTICE_BLOCK_USERS + i`` of the chunk has read (notices/lua/_counters.lua).
    As long and as wide as its counters need: 1 KiB for 2,048 users who read under 16."""
    return _key("notice", notice_tag(platform, chunk), "reads", int(block))


def notice_index(platform: str, chunk: int) -> str:
    """zset: announcement ids of the platform not yet expired, score = publish time (ms)."""
    return _key("notice", notice_tag(platform, chunk), "index")


def notice_expiry(platform: str, chunk: int) -> str:
    """zset: announcement ids of the index that expire, score = expiry time (ms)."""
    return _key("notice", notice_tag(platform, chunk), "expire")


def notice_meta(platform: str, chunk: int) -> str:
    """hash: ``rev`` (revision the index was built from), ``token`` (changes on
    every rebuild; callers cache the id list under it) and ``t`` (the chunk time in ms:
    the read counters count what was live then)."""
    return _key("notice", notice_tag(platform, chunk), "meta")


def notice_revision(platform: str) -> str:
    """string: counter bumped before every rebuild of a platform's indexes."""
    return _key("notice", "rev", platform)


def notice_chunks() -> str:
    """set: chunk numbers whose indexes have been built (they are kept in step)."""
    return _key("notice", "chunks")


def notice_layout() -> str:
    """string: ``<format>:<users per chunk>`` of the read state this Redis holds (bitmap
    offsets and counter blocks mean nothing under another). Global, no hash tag: read once
    per process outside any script, written by the rebuild that lays the state out."""
    return _key("notice", "layout")


def notice_scan_pattern() -> str:
    """SCAN pattern of every announcement key above (a layout change clears them all)."""
    return _key("notice", "*")


def notice_read_hours_of(key: str) -> tuple[str, int] | None:
    """(platform, announcement id) of a ``notice_read_hours`` key name, else None."""
    head = _key("notice", "")
    if not key.startswith(head) or not key.endswith(":hours"):
        return None
    tag, _, rest = key[len(head) :].partition("}:")
    pk = rest.removesuffix(":hours")
    if not tag.startswith("{") or not pk.isdigit():
        return None
    return tag[1:].split(":")[0], int(pk)


# --- messagecenter (inbox, bulletins, messages) -------------------------------------
# (owned by messagecenter/readmodel.py)
#
# Per-user keys carry ``user_tag(user_id)`` so the inbox Lua script (every key in
# KEYS) runs on one Redis Cluster slot. Global keys carry ``GLOBAL_TAG`` so the
# global Lua script can change several of them atomically (one slot too).

MC_GLOBAL_TAG = "{mcg}"


def mc_inbox(user_id: int) -> str:
    """zset: every item of the user's inbox; member ``<ref>|<category>|<month>|<offset>``.

    Score = the item's time in ms (creation, or a bulletin's display time): the
    inbox's one time axis. A page cursor (time_max, skip), ``since`` and the
    seen watermark (``mc_inbox_state`` "seen") are points on that axis, named
    as such in the read model and its scripts; nothing else is kept in it."""
    return _key("inbox", user_tag(user_id), "all")


def mc_inbox_category(user_id: int, category: str) -> str:
    """zset: the user's items of one category (same members and scores as ``mc_inbox``)."""
    return _key("inbox", user_tag(user_id), "cat", category)


def mc_inbox_counters(user_id: int) -> str:
    """hash: category -> number of live unread items (kept exact by the inbox scripts, messagecenter/lua/)."""
    return _key("inbox", user_tag(user_id), "unread")


def mc_inbox_unread(user_id: int, category: str = "") -> str:
    """zset: the user's live items whose read bit is 0, all of them ("" category) or one
    category's (same members and scores as ``mc_inbox`` / ``mc_inbox_category``); an unread-only
    page is a plain range of it. ZCARD of a category's zset = that category's counter in
    ``mc_inbox_counters`` (kept exact by the inbox scripts, checked by the drift check)."""
    return _key("inbox", user_tag(user_id), "unread_z", category or "all")


def mc_inbox_evicted(user_id: int) -> str:
    """set: placed members that left ``mc_inbox`` in a fan-out (cap or expiry) whose category
    and unread zsets, counter, push bit and expiry entry still hold them (the fan-out holds
    none of those keys); the next inbox script finishes their removal, a bounded number per
    call."""
    return _key("inbox", user_tag(user_id), "evicted")


def mc_inbox_arrivals(user_id: int) -> str:
    """zset: members a fan-out added to ``mc_inbox`` (with their expiry entry and month) whose
    other places (category zset, push bit, unread zsets and counter) the user's next inbox
    script gives them, a bounded number per call; score = the item's time (+inf: waiting for
    a call that passes its month's bitmaps)."""
    return _key("inbox", user_tag(user_id), "arrivals")


def mc_inbox_hidden(user_id: int) -> str:
    """set: refs (``m12``, ``b3``) the user deleted from the inbox; never merged back."""
    return _key("inbox", user_tag(user_id), "hidden")


def mc_inbox_archived(user_id: int) -> str:
    """zset: members the user archived, score = the item's time in the list (ms)."""
    return _key("inbox", user_tag(user_id), "archived")


def mc_inbox_snoozed(user_id: int) -> str:
    """zset: members the user snoozed, score = the wake time (ms); woken on read."""
    return _key("inbox", user_tag(user_id), "snoozed")


def mc_inbox_expiry(user_id: int) -> str:
    """zset: inbox members that expire, score = expire_at in ms (settled on every read)."""
    return _key("inbox", user_tag(user_id), "expiry")


def mc_inbox_months(user_id: int) -> str:
    """set: months (``yyyymm``) for which the user has push/read bitmaps."""
    return _key("inbox", user_tag(user_id), "months")


def mc_inbox_state(user_id: int) -> str:
    """hash: ``seen`` watermark (a time on ``mc_inbox``'s score axis, ms), ``settled`` removal
    version, ``pull`` sequence, ``bd`` bulletin display marker (display time, ms, of the latest
    bulletin merged into the inbox: a due bulletin displayed later still needs merging), ``rev``
    (moves with any change to the user's keys)."""
    return _key("inbox", user_tag(user_id), "state")


def mc_inbox_groups(user_id: int) -> str:
    """hash: ref of a grouped item's row -> JSON ``{key, count, actors, start}`` of its group
    (the row's count, its last three distinct actors, the time of the group's first item)."""
    return _key("inbox", user_tag(user_id), "groups")


def mc_inbox_groups_open(user_id: int) -> str:
    """hash: group key -> the member of its open group's row (open while that row is unread and
    listed; reading, archiving or deleting it ends the group)."""
    return _key("inbox", user_tag(user_id), "groups", "open")


def mc_inbox_groups_closed(user_id: int) -> str:
    """hash: ``"<end>|<group key>"`` -> the member of an ended group's row (end: the time, ms, the
    group ended at, its row's time then; see ``mc_inbox_group_ends``)."""
    return _key("inbox", user_tag(user_id), "groups", "closed")


def mc_inbox_group_ends(user_id: int, group_key: str) -> str:
    """zset: the times (ms) the user's groups of one key ended at, member = score = the time; they
    cut the key's items into groups (messagecenter/lua/_group.lua). Mirror of ``InboxGroupEnd``."""
    return mc_inbox_group(user_id, group_key) + ":ends"


def mc_inbox_group(user_id: int, group_key: str) -> str:
    """zset: the user's items of one group key, score = the item's time (``?group_key=``).

    The key names the group key by a digest: any text fits, and no key name
    carries what an operator typed."""
    digest = hashlib.sha1(group_key.encode(), usedforsecurity=False).hexdigest()[:20]
    return _key("inbox", user_tag(user_id), "group", digest)


def mc_user_groups(user_id: int) -> str:
    """set: ids of the user's groups (mirror of PostgreSQL memberships)."""
    return _key("user", "groups", user_tag(user_id))


def mc_user_mutes(user_id: int) -> str:
    """string: JSON of the user's mute periods (mirror of PostgreSQL), read by the merge on read."""
    return _key("user", "mutes", user_tag(user_id))


def mc_push_bitmap(user_id: int, month: int | str) -> str:
    """bitmap: bit = item offset within ``month``; 1 = pushed to the user (the item is readable by them)."""
    return _key("message", "push", user_tag(user_id), month)


def mc_read_bitmap(user_id: int, month: int | str) -> str:
    """bitmap: bit = item offset within ``month``; 1 = the user has read the item."""
    return _key("message", "read", user_tag(user_id), month)


def mc_read_ever_bitmap(user_id: int, month: int | str) -> str:
    """bitmap: bit = item offset within ``month``; 1 = the user has read the item at least once
    (never cleared by "unread"; tells first reads apart for the per-item read counters)."""
    return _key("message", "read", "ever", user_tag(user_id), month)


def mc_inbox_pages(user_id: int) -> str:
    """hash, the user's read cache: query ("<category>|<unread only>|<limit>") -> the API's
    rendered first page (JSON), "counts" -> the unread counters and unseen count, and each
    field + "#" -> "<tag>|<valid until ms>"; served while the tag is current (the inbox scripts'
    "Read cache"; a cache with a short lifetime: only users polling now hold one)."""
    return _key("inbox", user_tag(user_id), "pages")


def mc_inbox_responses(user_id: int) -> str:
    """hash: message ref -> "<action id>|<ms>", the user's answers to items' actions (mirror of
    PostgreSQL's responses): a page shows them without SQL."""
    return _key("inbox", user_tag(user_id), "responses")


def mc_inbox_scratch(user_id: int) -> str:
    """bitmap, transient: read_all.lua's work space within one call ("read all"
    computes each month's first reads there); deleted before the call ends."""
    return _key("inbox", user_tag(user_id), "scratch")


# Stands for a user id in key templates (a fan-out fills a template per recipient):
# SOH occurs in no key name.
USER_ID_FILL = "\x01"


def mc_deliver_key_templates(*, notifications: bool = False, expiry: bool = True, group_key: str = "") -> list[str]:
    """One recipient's stride of ``mc_deliver_keys`` with ``USER_ID_FILL`` for its id:
    the named functions' own names, for a stand-in id whose tag becomes the fill."""
    stand_in = 0
    tag, fill_tag = user_tag(stand_in), "{u" + USER_ID_FILL + "}"
    namers: list[Callable[[int], str]] = [mc_inbox, mc_inbox_hidden, mc_inbox_arrivals]
    if expiry:
        namers.append(mc_inbox_expiry)
    namers += [mc_inbox_months, live_user_version, mc_inbox_evicted]
    if notifications:
        namers.append(mc_user_notifications)
    if group_key:
        namers += [
            mc_inbox_groups,
            mc_inbox_groups_open,
            mc_inbox_groups_closed,
            lambda u: mc_inbox_group(u, group_key),
            lambda u: mc_inbox_group_ends(u, group_key),
        ]
    # The tag is the only place an id appears in these names.
    return [namer(stand_in).replace(tag, fill_tag) for namer in namers]


def mc_deliver_keys(
    user_ids: Iterable[int], *, notifications: bool = False, expiry: bool = True, group_key: str = ""
) -> list[str]:
    """The KEYS of messagecenter/lua/deliver.lua for these recipients, one stride per
    recipient in its order: ``mc_inbox``, ``mc_inbox_hidden``, ``mc_inbox_arrivals``,
    ``mc_inbox_expiry`` (only with ``expiry``: an item that never expires leaves that zset
    alone), ``mc_inbox_months``, ``live_user_version``, ``mc_inbox_evicted`` and, with
    ``notifications``, ``mc_user_notifications``, and with a ``group_key`` the recipient's
    ``mc_inbox_groups``, ``mc_inbox_groups_open``, ``mc_inbox_groups_closed``, ``mc_inbox_group``
    and ``mc_inbox_group_ends``: the few keys an item's
    arrival writes (the recipient's next read places it: its category zset, bitmaps and counters).

    The same names as those functions (a test holds them equal), filled into
    one template per call: a fan-out builds them for every recipient, and a
    function call per key cost more than the Redis work itself. (On a single
    Redis the fan-out packs the templates straight into the protocol instead:
    core.lua.pack_filled.)
    """
    names = mc_deliver_key_templates(notifications=notifications, expiry=expiry, group_key=group_key)
    # NUL occurs in no key name: one join, a replace per recipient, one split.
    template = "\x00".join(names)
    joined = "\x00".join(template.replace(USER_ID_FILL, str(int(u))) for u in user_ids)
    return joined.split("\x00") if joined else []


def mc_bulletin_access_time(user_id: int) -> str:
    """string: bulletin update marker the user's list last took in."""
    return _key("bulletin", "access", "time", user_tag(user_id))


def mc_bulletin_config() -> str:
    """zset: member ``<bulletin_id>_<usergroup_id>`` (0 = everyone), score = display time ms."""
    return _key("bulletin_notification_config", MC_GLOBAL_TAG)


def mc_bulletin_detail() -> str:
    """hash: field ``<bulletin_id>_<usergroup_id>`` -> bulletin JSON."""
    return _key("bulletin_notification_detail", MC_GLOBAL_TAG)


def mc_bulletin_members() -> str:
    """hash: bulletin id -> comma-separated config members (to drop them on edit/delete)."""
    return _key("bulletin", "members", MC_GLOBAL_TAG)


def mc_bulletin_update_time() -> str:
    """string: strictly increasing ms marker of the last bulletin change."""
    return _key("bulletin", "update", "time", MC_GLOBAL_TAG)


def mc_bulletin_changes() -> str:
    """zset: the bulletin change log. Member = a live config member (``<bulletin>_<group>``),
    score = the update marker of its last change; a read takes in the members above the
    user's access time. Holds exactly the config zset's members (dropped with them)."""
    return _key("bulletin", "changes", MC_GLOBAL_TAG)


def mc_bulletin_changes_floor() -> str:
    """string: the update marker from which the change log is complete; a user whose
    access time is below it (or when it is missing) merges every live bulletin once."""
    return _key("bulletin", "changes", "floor", MC_GLOBAL_TAG)


def mc_item_detail() -> str:
    """hash: item ref (``m12``, ``b3``) -> item JSON (title, body, images, ...)."""
    return _key("inbox", "detail", MC_GLOBAL_TAG)


def mc_item_detail_version() -> str:
    """string: counter the global write scripts bump when an item detail is
    written over (an edit changes what pages show)."""
    return _key("inbox", "detail", "version", MC_GLOBAL_TAG)


def mc_removed() -> str:
    """zset: inbox members removed everywhere (retracted, edited, deleted), score = removal version."""
    return _key("inbox", "removed", MC_GLOBAL_TAG)


def mc_removed_version() -> str:
    """string: counter of removals; a user whose settled version is lower settles on read."""
    return _key("inbox", "removed", "version", MC_GLOBAL_TAG)


def mc_removed_floor() -> str:
    """string: highest removal version trimmed away; users settled below it re-check their whole inbox."""
    return _key("inbox", "removed", "floor", MC_GLOBAL_TAG)


def mc_pull() -> str:
    """zset: live pull items, member ``<inbox member>|<created ms>|<expire ms>|<audience>``, score = sequence."""
    return _key("inbox", "pull", MC_GLOBAL_TAG)


def mc_pull_sequence() -> str:
    """string: counter of pull registrations (users merge the range above their watermark)."""
    return _key("inbox", "pull", "seq", MC_GLOBAL_TAG)


def mc_pull_audience(ref: str, chunk: int) -> str:
    """bitmap: bit = user id - chunk base; the send-time audience of a pull item (one key per id chunk)."""
    return _key("inbox", "audience", ref, chunk)


def mc_item_read_hours(ref: str) -> str:
    """hash: hour (ms since the epoch // 3,600,000) -> users who first read the item (``m12``,
    ``b3``) in that hour (0 -> 1 transitions of their read bit; the admin's read-rate chart).
    Global, one key per item: written from Python after the inbox scripts, never by a script."""
    return _key("inbox", "reads", ref)


def mc_first_reads_pending() -> str:
    """list: first reads not yet added to the per-item hour hashes, one entry
    ``<hour>|<ref>,<ref>,...`` per mark, or ``<hour>|@<month>|<bitmap>`` (the
    month's item offsets first read, binary: a "read all" of everything) per
    month of a mark (write-behind: a "read all" of 10,000 items costs one
    RPUSH, not two commands per item); folded by
    ``messagecenter.readmodel.reads.first_reads_fold`` before every chart read
    and by a beat job."""
    return _key("inbox", "reads", "pending")


# --- messagecenter: subscriptions and notifications ---------------------------------
# (owned by messagecenter/readmodel/notifications.py)
#
# A notification reaches a user's inbox through ``mc_inbox`` like any item
# (kind ``notification``, ref ``n<id>``): that zset, scored by creation time,
# is the per-subscriber list clients poll with ``since``. Beside it each
# user has ``mc_user_notifications``, scored by expiry, which the sweep trims
# with ZREMRANGEBYSCORE; it shares the user's hash tag so the inbox script
# can trim it together with the inbox. ``mc_notification_holders`` is the
# index the sweep walks (SSCAN): the users who may hold notifications.


def mc_subscribers(message_type_id: int, scope: str) -> str:
    """set: ``u<id>`` / ``g<id>`` subscribed to a message type in a scope (a warehouse, ...);
    a mirror of PostgreSQL."""
    return _key("sub", "type", int(message_type_id), scope)


def mc_subscribers_match() -> str:
    """SCAN MATCH pattern (glob) of every ``mc_subscribers`` set: the drift check walks them
    to find sets of a (type, scope) that PostgreSQL no longer has subscribers for."""
    head = _key("sub", "type", "")
    return "".join("\\" + c if c in "*?[]\\" else c for c in head) + "*"


def mc_subscribers_parse(key: str) -> tuple[int, str] | None:
    """(message type id, scope) named by an ``mc_subscribers`` key; None for any other key."""
    head = _key("sub", "type", "")
    if not key.startswith(head):
        return None
    type_id, sep, scope = key[len(head) :].partition(":")
    if not sep or not type_id.isdigit():
        return None
    return int(type_id), scope


def mc_user_notifications(user_id: int) -> str:
    """zset: inbox members of the user's notifications, score = expire_at in ms (swept)."""
    return _key("inbox", user_tag(user_id), "notif")


def mc_notification_holders() -> str:
    """set: ids of users whose ``mc_user_notifications`` may be non-empty (walked by the sweep)."""
    return _key("notification", "holders")


def mc_channel_sends(user_id: int, hour: int) -> str:
    """string: how many pushes and e-mails (beyond the inbox) the user was sent in ``hour``
    (hours since the epoch, UTC); the cap's counter (messagecenter/readmodel/channels.py).
    Expires two hours after it is made."""
    return _key("channel", "sends", user_tag(user_id), hour)


# --- live updates -------------------------------------------------------------------
# (owned by core/live.py, the transport)
#
# Every change to what a user's inbox or announcement counts show bumps the
# user's version and publishes a small event on the user's channel; the SSE
# stream listens to the channel, and the read cache's tag takes the version in.


def live_user_version(user_id: int) -> str:
    """string: counter bumped on every change to the user's inbox (part of the read cache's tag)."""
    return _key("live", "version", user_tag(user_id))


def live_user_channel(user_id: int) -> str:
    """pub/sub channel: JSON events ``{"v": version, "reason": str}`` for the user's open pages."""
    return _key("live", "channel", user_tag(user_id))


def live_user_channels(user_ids: Iterable[int]) -> list[str]:
    """``live_user_channel`` of many users at once (a fan-out publishes to each recipient's)."""
    key_prefix = _key()
    return [f"{key_prefix}live:channel:{{u{int(user_id)}}}" for user_id in user_ids]


def live_user_channel_template() -> str:
    """``live_user_channel`` with ``USER_ID_FILL`` for the user id."""
    return f"{_key()}live:channel:{{u{USER_ID_FILL}}}"


def live_broadcast_channel(scope: str) -> str:
    """pub/sub channel: events every open page of a scope receives (``everyone`` or a
    platform name), ``{"reason": str, "scope": str}``. Each process subscribes once
    and fans an event out to its own streams (core/live.py, ``LiveHub``)."""
    return _key("live", "broadcast", scope)


def live_due() -> str:
    """zset: broadcast events waiting for their time (a scheduled bulletin's display
    time, an announcement's publish time), member ``<channel>\\n<event JSON>``,
    score = when (ms); core/lua/live_due.lua publishes and drops the due ones."""
    return _key("live", "due", MC_GLOBAL_TAG)
