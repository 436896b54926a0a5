"""Demo data: each app's demo loader, found through the app registry.

An app with demo data names its ``seed(stdout)`` on its AppConfig
(``demo_seed``; ``core.contributions``); ``manage.py seed_demo`` runs them in
INSTALLED_APPS order, so the accounts' users exist before the items
addressed to them.
"""

from collections.abc import Callable
from typing import TextIO

from core.contributions import contributed

Seed = Callable[[TextIO], None]


def demo_seeds() -> list[Seed]:
    """Every app's demo loader, in INSTALLED_APPS order."""
    return contributed("demo_seed")
