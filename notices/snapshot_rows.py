"""The PostgreSQL side of restoring announcement read bitmaps: snapshot rows read back.

Apart from ``notices.snapshots`` (which copies Redis into these rows and
imports the read model) so that the read model, which restores a chunk's
bitmaps when it first builds the chunk's index, can read them without an
import cycle.
"""

from collections.abc import Sequence

from pyroaring import BitMap

from notices.models import AnnouncementReadSnapshot


def announcement_chunk_readers(
    *, platform: str, announcement_ids: Sequence[int], first_user: int, end_user: int
) -> dict[int, BitMap]:
    """Snapshot readers among users ``first_user`` <= id < ``end_user`` (one bitmap chunk)
    of these announcements on ``platform``; announcements without any are left out.

    For the first build of a chunk index (see ``readmodel._write_chunk``): it
    reads the rows of the platform's live announcements (a handful) through
    announcementreadsnapshot_unique.
    """
    if not announcement_ids:
        return {}
    window = BitMap(range(first_user, end_user))
    readers: dict[int, BitMap] = {}
    rows = AnnouncementReadSnapshot.objects.filter(platform=platform, announcement_id__in=announcement_ids)
    for pk, data in rows.values_list("announcement_id", "readers"):
        users = BitMap.deserialize(bytes(data)) & window if data else BitMap()
        if users:
            readers[pk] = users
    return readers
