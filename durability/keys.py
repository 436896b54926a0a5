"""The durability app's Redis key names."""

from core.keys import key


def readmodel_generation() -> str:
    """string: the generation number of the last full rebuild that filled this Redis
    (durability/healing.py; PostgreSQL keeps the same number). Missing: Redis lost its data."""
    return key("readmodel", "generation")
