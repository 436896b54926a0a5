"""django-notifications-hq's public surface on Django 5.2, delivered into the
message centre as well.

A site that used django-notifications-hq 1.8.3 keeps ``"notifications"`` in
INSTALLED_APPS, its ``notify.send(...)`` calls, templates, URLs and data; this
package answers under the same import name (``compat/`` is on the path, see
config/settings/base.py) and the same app label, on the same table. Each
``notify.send`` is also one message in the recipients' inboxes, and marks
made on either side reach the other (``notifications.services.inbox``).
docs/MIGRATING_FROM_NOTIFICATIONS_HQ.md says what differs.
"""

from notifications.signals import notify

# The release whose surface this package provides.
__version__ = "1.8.3"

__all__ = ["__version__", "notify"]
