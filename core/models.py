from django.conf import settings
from django.db import models


class Platform(models.TextChoices):
    """The "ends" of seed 000: each user belongs to one or more of them."""

    OPERATOR = "operator", "Operator"
    USER = "user", "User"
    CUSTOMER = "customer", "Customer"


class UserPlatform(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="platform_memberships")
    platform = models.CharField(max_length=16, choices=Platform.choices)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "platform"], name="userplatform_unique"),
        ]
        indexes = [
            # platform_user_counts(): users per platform for read ratios.
            models.Index(fields=["platform", "user"], name="userplatform_platform_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}@{self.platform}"
