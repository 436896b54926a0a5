"""Settings of the real Celery workers that tests/faults/test_worker_kill.py starts.

The worker must see exactly what the pytest run sees: its test database (the
name pytest-django gave it), its Redis db and key prefix, and a queue of its
own on the broker, all passed in the environment by the test. It does not
import config.settings.test: that module takes a test slot (another Redis db
and database) for the process importing it.

``MESSAGECENTER_TEST_CHUNK_SLEEP`` (seconds) slows every fan-out chunk down,
half before the task body and half after it returns (before the late ack), so
the test can SIGKILL a worker in the middle of a fan-out, in either window.
Test-only: product code has no such hook.
"""

import time
from typing import Any

from celery.signals import task_postrun, task_prerun

from config.settings.base import *  # noqa: F403
from config.settings.base import CELERY_BROKER_KIND, CELERY_BROKER_TRANSPORT_OPTIONS, DATABASES, _redis_cache, env

DATABASES["default"]["NAME"] = env("MESSAGECENTER_TEST_DATABASE_NAME")
CACHES = {"default": _redis_cache(env("MESSAGECENTER_TEST_CACHE_URL"))}
CELERY_TASK_DEFAULT_QUEUE: str = env("MESSAGECENTER_TEST_QUEUE")
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# As in the pytest run (config/settings/test.py): every user's part counts as
# filled, so a fan-out writes every recipient's and the test can count them.
MESSAGECENTER_SELF_HEALING = False
if CELERY_BROKER_KIND != "amqp":
    # kombu's Redis transport looks for tasks past their visibility timeout
    # only every interval x throttle seconds (10 x 10 by default): a killed
    # worker's task would come back 100 s later, not within seconds.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        **CELERY_BROKER_TRANSPORT_OPTIONS,
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    }

_CHUNK_SLEEP = env.float("MESSAGECENTER_TEST_CHUNK_SLEEP", default=0.0)
_SLOWED = {"messagecenter.message_fanout_chunk", "messagecenter.notification_fanout_chunk"}


def _slow_down(sender: Any = None, **kwargs: Any) -> None:
    if getattr(sender, "name", None) in _SLOWED:
        time.sleep(_CHUNK_SLEEP / 2)


if _CHUNK_SLEEP > 0:
    task_prerun.connect(_slow_down, weak=False)
    task_postrun.connect(_slow_down, weak=False)
