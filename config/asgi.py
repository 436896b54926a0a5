import os

import django

from core.asgi import ASGIHandler
from core.replicas import check_replicas_reachable

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
# What django.core.asgi.get_asgi_application does, with the project's handler
# (core/asgi.py: a bound on the requests that run sync code at once).
django.setup(set_prefix=False)
django_application = ASGIHandler()

# A replica that does not answer stops the process here, before it serves.
check_replicas_reachable()

# Imported after the line above, which sets Django up.
from core.fast_asgi import FastRoutes  # noqa: E402

# The hottest reads are answered on the event loop when they can (core/fast_asgi.py).
application = FastRoutes(django_application)
