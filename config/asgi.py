import os

import django

from core.asgi import ASGIHandler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
# What django.core.asgi.get_asgi_application does, with the project's handler
# (core/asgi.py: a bound on the requests that run sync code at once).
django.setup(set_prefix=False)
application = ASGIHandler()
