"""Demo data: the registry of each app's demo loader, and core's own (the operator and three users).

Each app registers a ``seed(stdout)`` from ``AppConfig.ready()``;
``manage.py seed_demo`` runs them in registration order (INSTALLED_APPS
order, so users exist before the items addressed to them).
"""

from collections.abc import Callable
from typing import TextIO

from django.contrib.auth import get_user_model

from core.models import Platform
from core.services import user_set_platforms

Seed = Callable[[TextIO], None]

# app label -> its seed, in registration order.
_seeds: dict[str, Seed] = {}


def register(app: str, seed: Seed) -> None:
    _seeds[app] = seed


def demo_seeds() -> list[Seed]:
    """Every registered demo loader, in registration order."""
    return list(_seeds.values())


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
