"""Settings of the standalone incumbent project: django-notifications-hq 1.8.3
on Django 4.2, in a database of its own on the same PostgreSQL as the main
bench (so both sides pay the same server, disk and loopback)."""

import os

SECRET_KEY = "bench-incumbent-only"  # noqa: S105 - never served, a local benchmark process
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "notifications",
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("INCUMBENT_DB_NAME", "messagecenter_bench_incumbent"),
        "HOST": os.environ.get("INCUMBENT_DB_HOST", "127.0.0.1"),
        "PORT": os.environ.get("INCUMBENT_DB_PORT", "5432"),
        "USER": os.environ.get("INCUMBENT_DB_USER", "postgres"),
        "PASSWORD": os.environ.get("INCUMBENT_DB_PASSWORD", ""),
        # As in the main bench settings: one connection kept for the whole run.
        "CONN_MAX_AGE": 600,
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
# The package's defaults (no soft delete): its fastest unread() query.
DJANGO_NOTIFICATIONS_CONFIG = {"USE_JSONFIELD": False, "SOFT_DELETE": False}
LOGGING = {"version": 1, "disable_existing_loggers": False, "root": {"level": "WARNING"}}
