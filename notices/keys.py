"""Every Redis key name of the notices app (announcements), built on ``core.keys``.

Each function documents the type of the key it names; the tests check that keys one
Lua script touches share a hash tag (one Redis Cluster slot)."""

from core.keys import key

# --- notices (announcements) --------------------------------------------------------
# (owned by notices/readmodel.py)
# Read bitmaps and per-user read counters are split by user-id range into chunks of
# MESSAGECENTER_NOTICE_CHUNK_USERS users. Everything one count script touches
# (a platform's chunk index, expiry zset, metadata and bitmaps) shares the
# chunk's hash tag, so it maps to one slot; different chunks and platforms
# spread over the cluster.


def summary(announcement_id: int) -> str:
    """string: a read-through entry (core/readthrough.py) of what a list shows of one
    announcement (title, summary, publish time, pinned), or of its absence; a tombstone
    after any change of its row. The id is the hash tag, which the fill lock shares."""
    return key("notice", "summary", f"{{a{int(announcement_id)}}}")


def tag(platform: str, chunk: int) -> str:
    """Hash tag of one (platform, chunk): ``{user}`` for chunk 0 (the plain
    ``notice:<platform>:<id>`` shape), ``{user:1}`` for chunk 1, ..."""
    return f"{{{platform}}}" if int(chunk) == 0 else f"{{{platform}:{int(chunk)}}}"


def bitmap(platform: str, chunk: int, announcement_id: int) -> str:
    """bitmap of a window of the chunk: a head saying the byte s it starts at, then bit i =
    the user with id ``chunk's first id + 8 * s + i``; 1 = read (notices/lua/_bits.lua)."""
    return key("notice", tag(platform, chunk), int(announcement_id))


def read_hours(platform: str, chunk: int, announcement_id: int) -> str:
    """hash: hour (ms since the epoch // 3,600,000) -> users of the chunk who marked it read
    in that hour (0 -> 1 transitions; the admin's read-rate chart). Same tag as the bitmap."""
    return key("notice", tag(platform, chunk), int(announcement_id), "hours")


def reads(platform: str, chunk: int, block: int) -> str:
    """string: byte 0 the counter width w (4, 8, 16 or 32 bits), then counter i at bit
    8 + i * w = how many announcements of the chunk index live at the chunk time (meta ``t``)
    user ``block * NOTICE_BLOCK_USERS + i`` of the chunk has read (notices/lua/_counters.lua).
    As long and as wide as its counters need: 1 KiB for 2,048 users who read under 16."""
    return key("notice", tag(platform, chunk), "reads", int(block))


def index(platform: str, chunk: int) -> str:
    """zset: announcement ids of the platform not yet expired, score = publish time (ms)."""
    return key("notice", tag(platform, chunk), "index")


def expiry(platform: str, chunk: int) -> str:
    """zset: announcement ids of the index that expire, score = expiry time (ms)."""
    return key("notice", tag(platform, chunk), "expire")


def meta(platform: str, chunk: int) -> str:
    """hash: ``rev`` (revision the index was built from), ``token`` (changes on
    every rebuild; callers cache the id list under it) and ``t`` (the chunk time in ms:
    the read counters count what was live then)."""
    return key("notice", tag(platform, chunk), "meta")


def revision(platform: str) -> str:
    """string: counter bumped before every rebuild of a platform's indexes."""
    return key("notice", "rev", platform)


def chunks() -> str:
    """set: chunk numbers whose indexes have been built (they are kept in step)."""
    return key("notice", "chunks")


def layout() -> str:
    """string: ``<format>:<users per chunk>`` of the read state this Redis holds (bitmap
    offsets and counter blocks mean nothing under another). Global, no hash tag: read once
    per process outside any script, written by the rebuild that lays the state out."""
    return key("notice", "layout")


def scan_pattern() -> str:
    """SCAN pattern of every announcement key above (a layout change clears them all)."""
    return key("notice", "*")


def read_hours_of(name: str) -> tuple[str, int] | None:
    """(platform, announcement id) of a ``read_hours`` key name, else None."""
    head = key("notice", "")
    if not name.startswith(head) or not name.endswith(":hours"):
        return None
    tag, _, rest = name[len(head) :].partition("}:")
    pk = rest.removesuffix(":hours")
    if not tag.startswith("{") or not pk.isdigit():
        return None
    return tag[1:].split(":")[0], int(pk)
