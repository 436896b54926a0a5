"""The translated names of categories, shared by the pages and the e-mails."""

from django.utils.translation import gettext_lazy as _

CATEGORY_LABELS = {
    "system": _("System"),
    "promotion": _("Promotions"),
    "transaction": _("Transactions"),
    "interaction": _("Interactions"),
}
