"""The user's chosen content language, without SQL per request.

``UserPreferences.language`` is read on every inbox page and item (the
reader's language, ``core.api.translations``): it is kept as a read-through
entry (``core.readthrough``, the policy of the user's platforms: rare
changes, each invalidating it after commit).
"""

from django.db import transaction

from core import readthrough
from messagecenter import keys as mc_keys
from messagecenter.models import UserPreferences


def user_language(user_id: int) -> str | None:
    """The language code the user chose, or None (then the request's applies)."""

    def load() -> str:
        # "" stands for "none chosen": None would read as a miss and be reloaded.
        row = UserPreferences.objects.filter(user_id=user_id).values_list("language", flat=True).first()
        return str(row or "")

    value = readthrough.read_through(mc_keys.user_language(user_id), load, policy=readthrough.platforms_policy())
    return str(value) if value else None


def user_language_changed(user_id: int) -> None:
    """The user's language preference changed: drop the entry after commit."""
    transaction.on_commit(lambda: readthrough.invalidate(mc_keys.user_language(user_id)))
