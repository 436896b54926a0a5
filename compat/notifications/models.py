"""The incumbent's ``Notification`` on its own table, and the link of each row
to the message centre's inbox item that shows it."""

from django.conf import settings
from django.db import models

from notifications.abstract import AbstractNotification


class Notification(AbstractNotification):
    class Meta(AbstractNotification.Meta):
        abstract = False
        indexes = [
            # The unread count of one recipient (the badge, has_notification):
            # the incumbent's index_together, named now that Django needs a name.
            models.Index(fields=["recipient", "unread"], name="notif_recipient_unread_idx"),
        ]


class InboxLink(models.Model):
    """Where a notification shows in its recipient's inbox: the message that
    ``notify.send`` delivered (one per send, so recipients of one send share
    it), and the read flag both sides agreed on when they last met.

    A side whose flag differs from ``unread`` changed since: the notification
    (pushed to the inbox) or the inbox item (pulled into the notification);
    ``notifications.services.inbox`` settles both. The notification may be
    gone (a hard delete): the link stays until its item is deleted from the
    inbox too, so no foreign-key constraint ties it to the row. Rows imported
    or sent with delivery off have no link and stay out of the inbox.
    """

    notification = models.OneToOneField(
        "notifications.Notification",
        primary_key=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="inbox_link",
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", db_index=False)
    message = models.ForeignKey("messagecenter.Message", on_delete=models.CASCADE, related_name="+")
    unread = models.BooleanField(default=True)

    class Meta:
        indexes = [
            # Every sync reads one user's links: the unread ones, those of
            # given messages, and those whose flags differ from their row's.
            models.Index(fields=["user", "unread"], name="notif_inboxlink_user_idx"),
        ]

    def __str__(self) -> str:
        return f"notification {self.notification_id} -> m{self.message_id}"

    @property
    def ref(self) -> str:
        """The inbox item's id (the message's ref)."""
        return f"m{self.message_id}"
