"""Announcement read state in PostgreSQL (``AnnouncementRead`` rows), the truth.

Apart from the services and selectors (which import the read model) so that
the read model, which restores a chunk's bitmaps when it first builds the
chunk's index, can read the rows without an import cycle.
"""

from collections.abc import Iterator, Sequence

from pyroaring import BitMap

from notices.models import AnnouncementPlatform, AnnouncementRead


def announcement_reads_set(*, user_id: int, announcement_id: int, platforms: Sequence[str], read: bool) -> bool:
    """Record (``read``) or drop the user's read rows of the announcement on these
    platforms, in the caller's transaction; True if any changed. The unique
    index's (announcement, platform, user) order serves both statements."""
    mine = AnnouncementRead.objects.filter(user_id=user_id, announcement_id=announcement_id, platform__in=platforms)
    had = set(mine.values_list("platform", flat=True))
    if not read:
        return bool(mine.delete()[0])
    missing = [p for p in platforms if p not in had]
    AnnouncementRead.objects.bulk_create(
        [AnnouncementRead(user_id=user_id, announcement_id=announcement_id, platform=p) for p in missing],
        ignore_conflicts=True,
    )
    return bool(missing)


def announcement_chunk_readers(
    *, platform: str, announcement_ids: Sequence[int], first_user: int, end_user: int
) -> dict[int, BitMap]:
    """Readers among users ``first_user`` <= id < ``end_user`` (one bitmap chunk)
    of these announcements on ``platform``; announcements without any are left out.

    For the first build of a chunk index (see ``readmodel._write_chunk``): a
    range read of announcementread_unique per announcement.
    """
    if not announcement_ids:
        return {}
    readers: dict[int, BitMap] = {}
    rows = AnnouncementRead.objects.filter(
        platform=platform, announcement_id__in=announcement_ids, user_id__gte=first_user, user_id__lt=end_user
    )
    for pk, user_id in rows.values_list("announcement_id", "user_id").iterator(chunk_size=10_000):
        readers.setdefault(pk, BitMap()).add(user_id)
    return readers


def announcement_readers_all() -> Iterator[tuple[tuple[str, int], BitMap]]:
    """((platform, announcement id), readers) for every announcement on every platform it
    still targets, one bitmap at a time (the rebuild's restore)."""
    targeted = AnnouncementPlatform.objects.filter(announcement__reads__isnull=False).distinct()
    for platform, pk in targeted.order_by("announcement_id", "platform").values_list("platform", "announcement_id"):
        users = AnnouncementRead.objects.filter(announcement_id=pk, platform=platform).values_list("user_id", flat=True)
        yield (platform, pk), BitMap(users.iterator(chunk_size=10_000))
