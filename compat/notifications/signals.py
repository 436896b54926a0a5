"""The app's signals.

``notify`` is the incumbent's: ``notify.send(actor, recipient=..., verb=...)``
creates the notifications (``notifications.receivers.notify_handler``).

``marks_changed`` is ours: the queryset methods that rewrite read or deleted
flags with one UPDATE (no ``post_save`` per row) send it with the recipients
they touched, so the inbox hears of the change after commit.
"""

from django.dispatch import Signal

notify = Signal()
marks_changed = Signal()
