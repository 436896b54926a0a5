"""Accounts: who may call the API (tokens) and which platforms (ends) a user belongs to."""

from django.conf import settings
from django.db import models


class Platform(models.TextChoices):
    """The "ends" (operator, user, customer) announcements target: each user belongs to one or more
    of them, and read state is kept per end."""

    OPERATOR = "operator", "Operator"
    USER = "user", "User"
    CUSTOMER = "customer", "Customer"


class ApiToken(models.Model):
    """An API token of one sign-in (accounts/tokens.py). Only the SHA-256 digest of
    the token is kept: a database backup or a read-only leak of this table
    gives no one API access."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    digest = models.CharField(max_length=64, unique=True, editable=False)  # the lookup: its unique index
    # A fingerprint of the password hash the token was issued under: a token
    # stops answering once the password changed, whichever way it changed.
    password_mark = models.CharField(max_length=16, editable=False)
    created_at = models.DateTimeField(editable=False)
    expires_at = models.DateTimeField()
    # Written when authentication reads the token from PostgreSQL (at most
    # once per cache lifetime), not on every request.
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        db_table = "core_apitoken"  # the table predates the app
        verbose_name = "API token"
        indexes = [
            # tokens_of(): a user's tokens, newest first.
            models.Index(fields=["user", "-created_at"], name="core_apitoken_user_idx"),
        ]

    def __str__(self) -> str:
        return f"API token {self.pk} of user {self.user_id}"


class UserPlatform(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="platform_memberships")
    platform = models.CharField(max_length=16, choices=Platform.choices)

    class Meta:
        db_table = "core_userplatform"  # the table predates the app
        constraints = [
            models.UniqueConstraint(fields=["user", "platform"], name="userplatform_unique"),
        ]
        indexes = [
            # platform_user_counts(): users per platform for read ratios.
            models.Index(fields=["platform", "user"], name="userplatform_platform_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}@{self.platform}"
