"""The message centre's Redis read model: the only code that sends Redis commands.

``entries`` describes items as the read model stores them, ``publish`` writes
global structures (details, bulletins, pull items, removals) and fans items
out, ``inbox`` serves one user's inbox (settle, merge, page, counts, marks).
"""

from messagecenter.readmodel.entries import InboxEntry, ms_to_datetime, to_ms

__all__ = ["InboxEntry", "ms_to_datetime", "to_ms"]
