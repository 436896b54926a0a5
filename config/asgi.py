import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
django_application = get_asgi_application()

# The event stream is answered before Django (core/live_asgi.py): imported
# after the line above, which sets Django up.
from core.live_asgi import LiveStreamRoute  # noqa: E402

application = LiveStreamRoute(django_application, path="/api/v1/inbox/stream/", event="inbox")
