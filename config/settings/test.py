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
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.InMemoryStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
