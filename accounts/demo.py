"""Demo data of the accounts app: the operator and three users."""

from typing import TextIO

from django.contrib.auth import get_user_model

from accounts.models import Platform
from accounts.services import user_set_platforms

DEMO_USERS = {
    "alice": ("alice-demo-pass", [Platform.USER, Platform.CUSTOMER]),
    "bob": ("bob-demo-pass", [Platform.USER]),
    "carol": ("carol-demo-pass", [Platform.CUSTOMER]),
}


def seed(stdout: TextIO) -> None:
    User = get_user_model()
    admin, created = User.objects.get_or_create(
        username="admin", defaults={"is_staff": True, "is_superuser": True, "email": "admin@example.com"}
    )
    if created:
        admin.set_password("admin")
        admin.save()
    stdout.write("  operator  admin / admin\n")
    for username, (password, platforms) in DEMO_USERS.items():
        user, created = User.objects.get_or_create(username=username, defaults={"email": f"{username}@example.com"})
        if created:
            user.set_password(password)
            user.save()
        user_set_platforms(user=user, platforms=[p.value for p in platforms])
        stdout.write(f"  user      {username} / {password}  ({', '.join(p.value for p in platforms)})\n")
