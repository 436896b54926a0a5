"""Settings for django-notifications-hq 1.8.3's own test suite, run against
this project's ``notifications`` app by ``make compat-check``
(scripts/compat_check.py), which puts the suite at ``notifications/tests``.

The project's test settings (its apps, PostgreSQL or SQLite, Redis or
fakeredis, a test slot of its own), then everything the suite's own settings
module sets for its tests (its URLs, middleware, templates, login URLs,
DJANGO_NOTIFICATIONS_CONFIG, ...), except the database, the static file
paths of its own checkout, and its app list, which is added to ours.
"""

import datetime

from django.utils import timezone

from config.settings.test import *  # noqa: F403
from config.settings.test import INSTALLED_APPS
from notifications.tests import settings as incumbent

# The one shim: ``django.utils.timezone.utc`` left Django in 5.0 and the
# suite imports it; it was this object.
timezone.utc = datetime.UTC  # type: ignore[attr-defined]

_KEEP_OURS = {"BASE_DIR", "DATABASES", "INSTALLED_APPS", "MIDDLEWARE_CLASSES", "STATICFILES_DIRS", "STATIC_ROOT"}

globals().update({name: value for name, value in vars(incumbent).items() if name.isupper() and name not in _KEEP_OURS})
INSTALLED_APPS = [*INSTALLED_APPS, *(app for app in incumbent.INSTALLED_APPS if app not in INSTALLED_APPS)]
