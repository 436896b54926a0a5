"""Settings of the fault drill's stack (``python -m bench.drill``).

The drill starts gunicorn, a Celery worker and beat with these settings and
passes ``DATABASE_URL`` (a database of its own), ``REDIS_URL`` and
``CELERY_BROKER_URL`` (a private redis-server it started, the broker on db 1
as in the README's production layout; or, with ``--broker rabbitmq``, a
virtual host of its own on the machine's RabbitMQ) in the environment;
base.py reads them.
Everything else is production behaviour (the Redis broker's visibility
timeout aside, below): self-healing on, late acknowledgement.
"""

import warnings

from config.settings.base import *  # noqa: F403
from config.settings.base import CELERY_BROKER_KIND, CELERY_BROKER_TRANSPORT_OPTIONS, REST_FRAMEWORK, env

DEBUG = False
MESSAGECENTER_KEY_PREFIX = "drill:"
# Small fan-out chunks: a large message runs long enough to kill a worker in the middle of it.
MESSAGECENTER_FANOUT_CHUNK = env.int("MESSAGECENTER_FANOUT_CHUNK", default=50)
# On a RabbitMQ shared with others without a virtual host of the drill's own
# (no rabbitmqctl), a queue of the drill's own.
CELERY_TASK_DEFAULT_QUEUE: str = env("MESSAGECENTER_DRILL_QUEUE", default="celery")
if CELERY_BROKER_KIND == "redis":
    # A worker SIGKILLed with a task taken but not started leaves it
    # unacknowledged; kombu's Redis transport hands it out again once the
    # visibility timeout has passed, looking every interval x throttle seconds
    # (10 x 10 by default). The drill's periodic jobs take seconds, so a short
    # timeout is safe here and shows that path within the drill's wait; a
    # deployment keeps it longer than its longest task (base.py).
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        **CELERY_BROKER_TRANSPORT_OPTIONS,
        "visibility_timeout": env.int("MESSAGECENTER_BROKER_VISIBILITY_TIMEOUT", default=10),
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    }
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# A handful of clients make thousands of requests: throttling them would be measured instead.
REST_FRAMEWORK = {**REST_FRAMEWORK, "DEFAULT_THROTTLE_CLASSES": []}
ALLOWED_HOSTS = ["*"]
LOGGING = {"version": 1, "disable_existing_loggers": False, "root": {"level": "WARNING"}}
warnings.filterwarnings("ignore", message="No directory at", category=UserWarning)
