"""The WSGI application: Django's own handler."""

import os

from django.core.wsgi import get_wsgi_application

from core.replicas import check_replicas_reachable

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
application = get_wsgi_application()

# A replica that does not answer stops the process here, before it serves.
check_replicas_reachable()
