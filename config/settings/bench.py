"""Benchmark settings: the machine's real PostgreSQL and Redis, own database
and Redis db so benchmarks never touch development or test data."""

import warnings

from config.settings.base import *  # noqa: F403
from config.settings.base import CACHES, REST_FRAMEWORK, _redis_cache, database_config, env

DEBUG = False
DATABASES = {
    "default": database_config(
        env.db("BENCH_DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/messagecenter_bench"),
        pool=env.bool("DATABASE_POOL", default=True),
        conn_max_age=600,
    ),
}
# db 3: concurrent test runs take dbs 15 down to 8 (config/settings/test.py's slots) and flush
# them; db 14 used to be wiped under the bench's feet mid-run.
REDIS_URL = env("BENCH_REDIS_URL", default="redis://127.0.0.1:6379/3")
REDIS_EMBEDDED = False
CACHES = {**CACHES, "default": _redis_cache(REDIS_URL)}
CELERY_TASK_ALWAYS_EAGER = True
MESSAGECENTER_KEY_PREFIX = "bench:"
# The bench flushes its Redis and fills it through the services itself: a
# healer rebuilding behind it would time PostgreSQL fallbacks instead.
MESSAGECENTER_SELF_HEALING = env.bool("MESSAGECENTER_SELF_HEALING", default=False)
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# In process the cases time services, not throttles. The HTTP case serves with
# the production throttles and rates (BENCH_THROTTLES=true): every request pays
# what a deployment's does, and a 429 shows in its rows.
if not env.bool("BENCH_THROTTLES", default=False):
    REST_FRAMEWORK = {**REST_FRAMEWORK, "DEFAULT_THROTTLE_CLASSES": []}
ALLOWED_HOSTS = ["*"]
LOGGING = {"version": 1, "disable_existing_loggers": False, "root": {"level": "WARNING"}}
# The project's URLs plus the HTTP case's trivial DRF endpoint (/bench/ping).
ROOT_URLCONF = "config.urls_bench"
# gunicorn serves the API only: whitenoise's warning about the uncollected static root is noise here.
warnings.filterwarnings("ignore", message="No directory at", category=UserWarning)
