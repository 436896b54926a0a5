"""Test settings: same selection rules as base (real services when the
variables are set, embedded ones otherwise), fast hashing, relaxed throttles
and an isolated Redis key prefix."""

from config.settings.base import *  # noqa: F403
from config.settings.base import REST_FRAMEWORK, env

DEBUG = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CELERY_TASK_ALWAYS_EAGER = True
MESSAGECENTER_KEY_PREFIX = env("MESSAGECENTER_KEY_PREFIX", default="test:")
REST_FRAMEWORK = {
    **REST_FRAMEWORK,
    "DEFAULT_THROTTLE_RATES": {"anon": "10000/min", "user": "100000/min"},
}
# Each test flushes Redis: the suite's read model is built by the tests
# themselves, not healed behind them (tests/faults/test_self_healing.py turns
# it on).
MESSAGECENTER_SELF_HEALING = env.bool("MESSAGECENTER_SELF_HEALING", default=False)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.InMemoryStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

# Test runs on one machine at the same time (a developer beside CI, several
# work trees) must not flush each other's Redis or drop each other's test
# database: each run takes a free slot, held by a lock for its lifetime, and
# uses the Redis db and PostgreSQL test database of that slot.
import fcntl  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
from typing import Any  # noqa: E402

from config.settings.base import CACHES, DATABASES, REDIS_URL, _redis_cache  # noqa: E402


def try_lock(name: str) -> Any:
    """An open file in the temp dir under an exclusive lock, held until it is
    closed (or the process ends); None when another process holds it."""
    handle = open(os.path.join(tempfile.gettempdir(), f"messagecenter-test-{name}.lock"), "w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    return handle


def _take_slot(slots: int = 12) -> int:
    # Slots map to Redis dbs 15 down to 4 (the benchmark uses db 3). When every
    # slot is busy, wait for one: sharing a slot would flush another run's data.
    import time

    while True:
        for slot in range(slots):
            handle = try_lock(f"slot-{slot}")
            if handle is not None:
                _held_locks.append(handle)
                return slot
        time.sleep(1)


_held_locks: list[object] = []
TEST_SLOT = _take_slot()
if TEST_SLOT and REDIS_URL:
    _base, _, _db = REDIS_URL.rpartition("/")
    if _db.isdigit():
        CACHES = {**CACHES, "default": _redis_cache(f"{_base}/{max(0, int(_db) - TEST_SLOT)}")}
if TEST_SLOT and "sqlite" not in DATABASES["default"]["ENGINE"]:
    DATABASES["default"]["TEST"] = {"NAME": f"test_{DATABASES['default']['NAME']}_{TEST_SLOT}".replace("/", "_")}

# Tests never run collectstatic: serve from the finders, with no STATIC_ROOT to warn about.
STATIC_ROOT = None  # type: ignore[assignment]
WHITENOISE_USE_FINDERS = True
# Every test client builds the middleware anew, and WhiteNoise would then list
# and stat every static file the finders know (~170 files, ~5 ms) each time:
# with autorefresh it looks up only the files a request asks for.
WHITENOISE_AUTOREFRESH = True

# Django's backends with a flush that deletes the rows a test left instead of
# truncating every table (tests/fixtures/backends): a tenth of the time.
_TEST_ENGINES = {
    "django.db.backends.postgresql": "tests.fixtures.backends.postgresql",
    "django.db.backends.sqlite3": "tests.fixtures.backends.sqlite3",
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Django's own choice for a SQLite test database, said out loud: pytest-django
    # recognises SQLite by the engine's name, and would otherwise give each xdist
    # worker a database file named after the path of db.sqlite3.
    DATABASES["default"]["TEST"] = {"NAME": ":memory:"}
    # In memory with a shared cache, locks are the cache's: a waiting IMMEDIATE
    # transaction would fail at once rather than wait, so tests keep SQLite's default.
    DATABASES["default"].get("OPTIONS", {}).pop("transaction_mode", None)
DATABASES["default"]["ENGINE"] = _TEST_ENGINES.get(DATABASES["default"]["ENGINE"], DATABASES["default"]["ENGINE"])
