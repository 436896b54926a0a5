"""The translated names of categories, shared by the pages and the e-mails, and
the actors line of a grouped row."""

from collections.abc import Mapping
from typing import Any

from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

CATEGORY_LABELS = {
    "system": _("System"),
    "promotion": _("Promotions"),
    "transaction": _("Transactions"),
    "interaction": _("Interactions"),
}


def group_actors_line(group: Mapping[str, Any]) -> str:
    """A grouped row's actors line: "Ann", "Ann and Ben", "Ann, Ben and Cat",
    "Ann, Ben and 2 others" (the group's items beyond the actors named), or
    "3 items" when no item named an actor. inbox.js builds the same line
    from the same catalogue strings."""
    actors = [str(a) for a in group.get("actors") or []]
    count = int(group.get("count") or 0)
    others = count - len(actors)
    if not actors:
        return ngettext("%(count)s item", "%(count)s items", count) % {"count": count}
    # Translators: joins the names of a grouped row's actors ("Ann, Ben").
    names = gettext(", ").join(actors if others > 0 else actors[:-1])
    if others > 0:
        return ngettext("%(names)s and %(count)s other", "%(names)s and %(count)s others", others) % {
            "names": names,
            "count": others,
        }
    if len(actors) == 1:
        return actors[0]
    return gettext("%(names)s and %(last)s") % {"names": names, "last": actors[-1]}
