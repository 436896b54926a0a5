"""Demo data: the registry of each app's demo loader (accounts registers the users first).

Each app registers a ``seed(stdout)`` from ``AppConfig.ready()``;
``manage.py seed_demo`` runs them in registration order (INSTALLED_APPS
order, so users exist before the items addressed to them).
"""

from collections.abc import Callable
from typing import TextIO

Seed = Callable[[TextIO], None]

# app label -> its seed, in registration order.
_seeds: dict[str, Seed] = {}


def register(app: str, seed: Seed) -> None:
    _seeds[app] = seed


def demo_seeds() -> list[Seed]:
    """Every registered demo loader, in registration order."""
    return list(_seeds.values())
