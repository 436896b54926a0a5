"""The embedded Redis: one fakeredis server shared by the whole process.

Used only when ``REDIS_URL`` is unset, so that ``make run`` works with nothing
but Python. Lua runs through lupa. Real deployments and CI use a real Redis.
"""

from typing import Any

import fakeredis

SERVER = fakeredis.FakeServer()


def fake_pool_kwargs() -> dict[str, Any]:
    return {"connection_class": fakeredis.FakeRedisConnection, "server": SERVER}
