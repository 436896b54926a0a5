"""Settings of the real ASGI server tests/core/test_asgi_connections.py starts.

The server must see what the pytest run sees: its test database (the name
pytest-django gave it), its Redis db and key prefix, all passed in the
environment by the test. Like config/settings/test_worker.py it does not
import config.settings.test, which takes a test slot of its own for the
process importing it. The pool's sizes come from the environment too
(``DATABASE_POOL_*``, read by base), so the test chooses the bound it checks.
"""

from config.settings.base import *  # noqa: F403
from config.settings.base import DATABASES, REST_FRAMEWORK, _redis_cache, env

DEBUG = False
DATABASES["default"]["NAME"] = env("MESSAGECENTER_TEST_DATABASE_NAME")
# The test tells the server's connections from its own by this name.
DATABASES["default"].setdefault("OPTIONS", {})["application_name"] = env("MESSAGECENTER_TEST_APPLICATION_NAME")
CACHES = {"default": _redis_cache(env("MESSAGECENTER_TEST_CACHE_URL"))}
MESSAGECENTER_KEY_PREFIX = env("MESSAGECENTER_KEY_PREFIX")
MESSAGECENTER_SELF_HEALING = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Hundreds of requests from a handful of users in a few seconds.
REST_FRAMEWORK = {**REST_FRAMEWORK, "DEFAULT_THROTTLE_CLASSES": []}
LOGGING = {"version": 1, "disable_existing_loggers": False, "root": {"level": "WARNING"}}
