import os

from django.core.wsgi import get_wsgi_application

from core.replicas import check_replicas_reachable

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
django_application = get_wsgi_application()
# A replica that does not answer stops the process here, before it serves.
check_replicas_reachable()

from core.fast_wsgi import FastWSGIRoutes  # noqa: E402

# The hottest API requests are answered before Django when they can (core/fast_wsgi.py).
application = FastWSGIRoutes(django_application)
