"""Loads the suite's fixtures, one plugin per concern (tests/fixtures/).

The personas (``operator``, ``recipient``, ``other_recipient``, ``outsider``)
and their API clients come from tests/fixtures/personas.py and clients.py.
Every test starts with an empty read model (tests/fixtures/readmodel.py).
Each run, and each xdist worker of a run, takes a test slot of its own
(config/settings/test.py: a Redis db, a PostgreSQL test database) and a key
prefix of its own (``test:s<slot>:``). With ``MESSAGECENTER_REDIS_CLUSTER_URL``
set (``make test-cluster``) the read model is on a Redis Cluster, where only
the run's keys are deleted; tests marked ``not_on_cluster`` are deselected
there, visibly, with their reasons (tests/fixtures/selection.py).

The helpers test modules import by name are re-exported here.
"""

from pathlib import Path

import pytest

# The plugins hold assertions (assert_error): rewritten like a conftest's,
# although this module imports them before pytest loads them as plugins.
PLUGINS = ["personas", "clients", "readmodel", "cluster", "selection"]
pytest.register_assert_rewrite(*(f"tests.fixtures.{name}" for name in PLUGINS))

from tests.fixtures.clients import assert_error, client_for  # noqa: E402
from tests.fixtures.readmodel import flush_redis, on_cluster, round_trips, script_cache_flush  # noqa: E402
from tests.fixtures.selection import note_deselection  # noqa: E402

pytest_plugins = [f"tests.fixtures.{name}" for name in PLUGINS]

ROOT = Path(__file__).resolve().parent.parent

__all__ = [
    "ROOT",
    "assert_error",
    "client_for",
    "flush_redis",
    "note_deselection",
    "on_cluster",
    "round_trips",
    "script_cache_flush",
]
