"""Settings shared by every environment.

Everything configurable comes from the environment through one ``environ.Env``.
When ``DATABASE_URL``, ``REDIS_URL`` or ``CELERY_BROKER_URL`` are unset the
project runs on embedded defaults: a SQLite file, an in-process fakeredis
server (with Lua through lupa) and eager Celery tasks, so it starts on a
machine with nothing but Python.
"""

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import environ
from csp.constants import NONCE
from django.core.exceptions import ImproperlyConfigured

from core.breaker import BreakerConnection
from core.brokers import amqp_settings, broker_kind
from core.replicas import replica_databases

BASE_DIR = Path(__file__).resolve().parent.parent.parent

# compat/ holds drop-in packages under the import names sites already use
# (``notifications``: django-notifications-hq's surface, compat/notifications).
# Every entry point reads these settings before it loads an app (manage.py,
# gunicorn, uvicorn, Celery, pytest), so the path is set here, once. Appended:
# ``make compat-check`` puts a copy with the incumbent's tests ahead of it.
if str(BASE_DIR / "compat") not in sys.path:
    sys.path.append(str(BASE_DIR / "compat"))

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

SECRET_KEY = env("SECRET_KEY", default="dev-insecure-secret-key-change-me-0123456789abcdef")
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS: list[str] = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS: list[str] = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "csp",
    "core",
    "durability",
    "audit",
    "insight",
    "accounts",
    "webhooks",
    "live",
    "notices",
    "messagecenter",
    "notifications",
]

# The libraries' own classes and the project's plain (sync) ones; under ASGI
# Django runs the stack in its thread as it does for any sync middleware.
MIDDLEWARE = [
    # First: request latency per route for /metrics, the whole stack included.
    "insight.metrics.RequestMetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "core.middleware.RequestSizeLimitMiddleware",
    # A PostgreSQL outage in any view is a 503 with Retry-After, not a 500.
    "core.middleware.DatabaseUnavailableMiddleware",
    # Read requests may read from a replica; a request that wrote pins its user to the primary.
    "core.replicas.ReplicaReadsMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The page's language: the language cookie (the switcher sets it), else the
    # browser's Accept-Language, else LANGUAGE_CODE.
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last: turns a lockout the auth backend flagged into the lockout answer.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------
# PostgreSQL (psycopg 3) when DATABASE_URL is set, else a SQLite file.
#
# On PostgreSQL every process borrows its connections from psycopg's pool
# (Django's "pool" option): a connection goes back to the pool when the request
# that used it finishes, whichever thread ran it. Persistent connections
# (CONN_MAX_AGE) belong to a thread instead, and an ASGI server runs each
# request's sync code in a thread of its own: every such thread kept its own
# connection open until PostgreSQL refused new clients. With the pool a
# process never holds more than DATABASE_POOL_MAX_SIZE connections, under
# uvicorn and gunicorn alike; CONN_MAX_AGE applies only with the pool off.
DATABASE_POOL_MIN_SIZE: int = env.int("DATABASE_POOL_MIN_SIZE", default=2)
DATABASE_POOL_MAX_SIZE: int = env.int("DATABASE_POOL_MAX_SIZE", default=10)
# How long a request waits for a free pooled connection before it fails
# (a 503 with Retry-After, as for any PostgreSQL outage).
DATABASE_POOL_TIMEOUT: float = env.float("DATABASE_POOL_TIMEOUT", default=5.0)
# Connections above DATABASE_POOL_MIN_SIZE left idle this long are closed, one
# per interval: a burst's connections go back to PostgreSQL afterwards.
DATABASE_POOL_MAX_IDLE: float = env.float("DATABASE_POOL_MAX_IDLE", default=600.0)


def database_config(config: dict[str, Any], *, pool: bool, conn_max_age: int) -> dict[str, Any]:
    """``config`` (a parsed database URL) with the connection policy: the pool
    on PostgreSQL when ``pool`` is set, else persistent connections."""
    config["CONN_HEALTH_CHECKS"] = True
    if pool and config["ENGINE"] == "django.db.backends.postgresql":
        config["CONN_MAX_AGE"] = 0  # the pool keeps the connections; Django refuses both
        config.setdefault("OPTIONS", {})["pool"] = {
            "min_size": DATABASE_POOL_MIN_SIZE,
            "max_size": DATABASE_POOL_MAX_SIZE,
            "timeout": DATABASE_POOL_TIMEOUT,
            "max_idle": DATABASE_POOL_MAX_IDLE,
        }
    else:
        config["CONN_MAX_AGE"] = conn_max_age
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # The embedded setup writes from more than one thread (the
        # rebuild's) and process. A deferred transaction
        # that reads, then writes, fails at once with "database is locked"
        # when another writer got in between; one that starts IMMEDIATE waits
        # its turn (up to the timeout) instead.
        config.setdefault("OPTIONS", {}).update({"transaction_mode": "IMMEDIATE", "timeout": 20})
    return config


DATABASES = {
    "default": database_config(
        env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
        pool=env.bool("DATABASE_POOL", default=True),
        conn_max_age=env.int("CONN_MAX_AGE", default=60),
    )
}

# Read replicas (core/replicas.py): comma-separated PostgreSQL URLs of streaming
# replicas of DATABASE_URL (none: every query goes to the primary). Read
# requests' reads go to one of them unless the user wrote within
# DATABASE_REPLICA_PIN_SECONDS, or the replica lags more than
# DATABASE_REPLICA_MAX_LAG_SECONDS (measured at most every
# DATABASE_REPLICA_LAG_CHECK_SECONDS per process), or it failed within
# DATABASE_REPLICA_DOWN_SECONDS. DATABASE_REPLICA_TIMEOUT bounds the wait for a
# connection to a replica (a dead one costs that once, then is skipped).
DATABASE_REPLICA_URLS: list[str] = env.list("DATABASE_REPLICA_URLS", default=[])
DATABASE_REPLICA_PIN_SECONDS: float = env.float("DATABASE_REPLICA_PIN_SECONDS", default=10.0)
DATABASE_REPLICA_MAX_LAG_SECONDS: float = env.float("DATABASE_REPLICA_MAX_LAG_SECONDS", default=5.0)
DATABASE_REPLICA_LAG_CHECK_SECONDS: float = env.float("DATABASE_REPLICA_LAG_CHECK_SECONDS", default=2.0)
DATABASE_REPLICA_DOWN_SECONDS: float = env.float("DATABASE_REPLICA_DOWN_SECONDS", default=5.0)
DATABASE_REPLICA_TIMEOUT: float = env.float("DATABASE_REPLICA_TIMEOUT", default=1.0)
_REPLICAS = replica_databases(DATABASE_REPLICA_URLS, primary=DATABASES["default"], timeout=DATABASE_REPLICA_TIMEOUT)
DATABASES.update(_REPLICAS)
DATABASE_REPLICA_ALIASES: list[str] = list(_REPLICAS)
DATABASE_ROUTERS = ["core.replicas.ReplicaRouter"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Retry-After of the 503 answered while PostgreSQL cannot be reached.
DATABASE_RETRY_AFTER_SECONDS: int = env.int("DATABASE_RETRY_AFTER_SECONDS", default=30)

# --- Redis ------------------------------------------------------------------
# The read model and Django's cache share django-redis's "default" alias.
# Short timeouts and no retry loop: redis-py's defaults (5 s timeouts plus
# retries) hang a request for about a minute when Redis is dead.
REDIS_URL: str = env("REDIS_URL", default="")
REDIS_EMBEDDED = not REDIS_URL
REDIS_SOCKET_TIMEOUT = env.float("REDIS_SOCKET_TIMEOUT", default=0.5)
REDIS_BREAKER_COOLDOWN = env.float("REDIS_BREAKER_COOLDOWN", default=5.0)
# A ceiling on each process's Redis connections (core.breaker.BoundedConnectionPool):
# under an ASGI server every concurrent request has a thread of its own, and
# redis-py's plain pool opens a connection per busy thread without limit. A
# request waits up to REDIS_POOL_TIMEOUT seconds for a free connection; past
# that the read model falls back to PostgreSQL and anything else answers 503.
# The event streams' subscriptions are apart from the pool (one connection).
REDIS_POOL_MAX_CONNECTIONS = env.int("REDIS_POOL_MAX_CONNECTIONS", default=32)
REDIS_POOL_TIMEOUT = env.float("REDIS_POOL_TIMEOUT", default=1.0)


def _redis_cache(url: str) -> dict[str, Any]:
    pool_class = "core.breaker.BoundedConnectionPool"
    pool_kwargs: dict[str, Any] = {
        "max_connections": REDIS_POOL_MAX_CONNECTIONS,
        "timeout": REDIS_POOL_TIMEOUT,
        "socket_connect_timeout": REDIS_SOCKET_TIMEOUT,
        "socket_timeout": REDIS_SOCKET_TIMEOUT,
        "retry_on_timeout": False,
        "health_check_interval": 30,
        # Fail fast for a while after a failure instead of paying a timeout per call.
        "connection_class": BreakerConnection,
        "breaker_cooldown": REDIS_BREAKER_COOLDOWN,
    }
    if not url:
        from core.embedded import fake_pool_kwargs

        url = "redis://embedded:6379/0"
        pool_class = "redis.ConnectionPool"  # in-process fakeredis: no sockets to bound
        pool_kwargs = fake_pool_kwargs()
    return {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": url,
        "OPTIONS": {
            "CLIENT_CLASS": "django_redis.client.DefaultClient",
            "CONNECTION_POOL_CLASS": pool_class,
            "CONNECTION_FACTORY": "core.breaker.SharedPoolFactory",
            "CONNECTION_POOL_KWARGS": pool_kwargs,
            # Django's own cache (throttles, cached sessions) fails open when
            # Redis is down; the read model uses the raw client and handles
            # RedisError itself.
            "IGNORE_EXCEPTIONS": True,
        },
    }


CACHES = {"default": _redis_cache(REDIS_URL)}
DJANGO_REDIS_IGNORE_EXCEPTIONS = True
DJANGO_REDIS_LOG_IGNORED_EXCEPTIONS = True

# Sessions live in the database with a cache in front: cache-only sessions
# cannot even be created while Redis is down.
SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"

# --- Celery -----------------------------------------------------------------
CELERY_BROKER_URL: str = env("CELERY_BROKER_URL", default="")
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
# With Redis as the broker, a task a worker took but never acknowledged (late
# acks: the worker died, or lost the broker) is handed out again once this many
# seconds have passed; a task still running by then would run twice. So it
# must exceed the longest task. Delivery tasks are short (one chunk is at most
# MESSAGECENTER_FANOUT_CHUNK users in pipelined deliver.lua calls); the long
# ones are the periodic jobs that walk the whole read model (check_redis,
# notices.rebuild_all), minutes on a large install. Half an
# hour leaves them room. Delivery does not wait that long after a lost
# worker: its pending rows are handed over again after their lease (below;
# running one twice changes nothing).
MESSAGECENTER_BROKER_VISIBILITY_TIMEOUT: int = env.int("MESSAGECENTER_BROKER_VISIBILITY_TIMEOUT", default=30 * 60)
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {
    "visibility_timeout": MESSAGECENTER_BROKER_VISIBILITY_TIMEOUT,
    # A publish to a broker that does not answer fails at once instead of
    # kombu reconnecting for seconds (about 6 s against a refused port) while
    # the request waits: delivery work is a committed row, so the relay is the
    # retry (messagecenter/services/delivery.py). Workers reconnect on their
    # own terms (broker_connection_retry).
    "max_retries": 0,
    "socket_connect_timeout": env.float("MESSAGECENTER_BROKER_CONNECT_TIMEOUT", default=1.0),
}
# RabbitMQ (core/brokers.py): quorum queues and publisher confirms. Acks stay
# late and the prefetch at one task per worker process (above): a fan-out
# chunk a worker holds is one it runs, and a worker that dies hands back only
# that one (RabbitMQ requeues it when the connection drops, at once: no
# visibility timeout to wait for).
CELERY_BROKER_KIND = broker_kind(CELERY_BROKER_URL)
if CELERY_BROKER_KIND == "amqp":
    _AMQP = amqp_settings()
    CELERY_TASK_DEFAULT_QUEUE_TYPE: str = _AMQP["TASK_DEFAULT_QUEUE_TYPE"]
    CELERY_TASK_CREATE_MISSING_QUEUE_TYPE: str = _AMQP["TASK_CREATE_MISSING_QUEUE_TYPE"]
    CELERY_WORKER_DETECT_QUORUM_QUEUES: bool = _AMQP["WORKER_DETECT_QUORUM_QUEUES"]
    CELERY_BROKER_TRANSPORT_OPTIONS.update(_AMQP["BROKER_TRANSPORT_OPTIONS"])
# Pending deliveries (messagecenter/services/delivery.py): how often beat's
# relay hands due rows to the workers; the longest wait before a delivery that
# failed on Redis (or on the broker) is tried again (the backoff doubles up to
# it, so fan-out resumes within seconds of Redis' return); and how long a row
# handed to Celery may stay before it is handed over again (longer than a
# delivery task waits and runs; a duplicate is harmless, a lost task is not).
MESSAGECENTER_DELIVERY_RELAY_SECONDS: float = env.float("MESSAGECENTER_DELIVERY_RELAY_SECONDS", default=2.0)
MESSAGECENTER_DELIVERY_RETRY_MAX_SECONDS: float = env.float("MESSAGECENTER_DELIVERY_RETRY_MAX_SECONDS", default=4.0)
MESSAGECENTER_DELIVERY_LEASE_SECONDS: float = env.float("MESSAGECENTER_DELIVERY_LEASE_SECONDS", default=5 * 60.0)
# Once a worker starts a row's task the row's lease is cut to this: a worker
# killed mid-task (its task then sits unacknowledged on a Redis broker for the
# visibility timeout) delays that delivery by this much, not by the lease
# above, which has to cover the wait in the queue too. Longer than a delivery
# task runs (a run past it is handed over once more: harmless, as above).
MESSAGECENTER_DELIVERY_RUN_LEASE_SECONDS: float = env.float("MESSAGECENTER_DELIVERY_RUN_LEASE_SECONDS", default=15.0)
# How often beat replays the outbox of read-model writes that failed while Redis was down.
MESSAGECENTER_OUTBOX_REPLAY_SECONDS: float = env.float("MESSAGECENTER_OUTBOX_REPLAY_SECONDS", default=10.0)
# Self-healing read model (durability/healing.py): each process checks Redis's
# generation marker at most this often and, when it is missing or stale,
# serves reads from PostgreSQL while one process rebuilds Redis.
MESSAGECENTER_SELF_HEALING: bool = env.bool("MESSAGECENTER_SELF_HEALING", default=True)
MESSAGECENTER_HEALING_CHECK_SECONDS: float = env.float("MESSAGECENTER_HEALING_CHECK_SECONDS", default=1.0)
# A user's part of the read model (messagecenter/fill.py) leaves Redis after
# this long without a read or mark of theirs (their state hash expires; beat's
# idle job then drops the rest), and is filled again on their next read.
MESSAGECENTER_USER_IDLE_SECONDS: int = env.int("MESSAGECENTER_USER_IDLE_SECONDS", default=3 * 24 * 3600)
# Retention (messagecenter/services/retention.py): messages and notifications
# whose expiry is more than this many days past leave PostgreSQL, with their
# audiences, fan-out chunks, pending rows and hidden-item rows; beat runs the
# purge this often, in batches of this many items (one short transaction each).
MESSAGECENTER_RETENTION_DAYS: float = env.float("MESSAGECENTER_RETENTION_DAYS", default=30.0)
MESSAGECENTER_RETENTION_SECONDS: float = env.float("MESSAGECENTER_RETENTION_SECONDS", default=60 * 60.0)
MESSAGECENTER_RETENTION_BATCH: int = env.int("MESSAGECENTER_RETENTION_BATCH", default=200)
CELERY_BEAT_SCHEDULE: dict[str, dict[str, Any]] = {
    # Prunes expired announcements from the platform indexes and rebuilds them
    # from PostgreSQL (correctness never waits for it: reads filter by time).
    "notices-rebuild": {"task": "notices.rebuild_all", "schedule": 60 * 60},
    # Frees the details of expired messages (inboxes already hide them at expire_at).
    "messagecenter-cleanup-expired": {"task": "messagecenter.cleanup_expired", "schedule": 10 * 60},
    # Rows of items long expired leave PostgreSQL (and the read model with them).
    "messagecenter-retention-purge": {
        "task": "messagecenter.retention_purge",
        "schedule": MESSAGECENTER_RETENTION_SECONDS,
    },
    # Bounds the global list of removed items that readers settle against.
    "messagecenter-removed-trim": {"task": "messagecenter.removed_trim", "schedule": 60 * 60},
    # First reads are written behind (one list entry per mark); this folds them
    # into the per-item hourly counters of the read-rate chart.
    "messagecenter-first-reads-fold": {"task": "messagecenter.first_reads_fold", "schedule": 60},
    # Expiry job: expired notifications leave the per-user zsets (ZREMRANGEBYSCORE
    # on the expiry score) in bounded batches (reads already hide them exactly at expiry).
    "messagecenter-notifications-sweep": {"task": "messagecenter.notifications_sweep", "schedule": 60},
    # Operator-configured rules that are due (last_run_at + interval <= now).
    "messagecenter-rules-run-due": {"task": "messagecenter.rules_run_due", "schedule": 60},
    # Read-model writes (and marks) that failed while Redis was down, replayed in order.
    "core-outbox-replay": {
        "task": "core.outbox_replay",
        "schedule": MESSAGECENTER_OUTBOX_REPLAY_SECONDS,
    },
    # Deliveries and fan-out chunks not done yet (broker or Redis was down), handed to the workers again.
    "messagecenter-delivery-relay": {
        "task": "messagecenter.delivery_relay",
        "schedule": MESSAGECENTER_DELIVERY_RELAY_SECONDS,
    },
    # Users' parts of the read model whose state expired (idle) or was evicted: the rest dropped.
    "messagecenter-inbox-idle-drop": {"task": "messagecenter.inbox_idle_drop", "schedule": 15 * 60},
}

# --- Auth, i18n, static -------------------------------------------------------
# Session auth's per-request user lookup comes from the Redis cache (no SQL).
AUTHENTICATION_BACKENDS = [
    # First: refuses a locked-out username or address before any password check.
    "accounts.authentication.LoginLimitBackend",
    "accounts.authentication.CachedModelBackend",
]

# --- Brute-force limits (django-axes) -----------------------------------------
# Failed sign-ins (pages, admin, the token endpoint) are counted in PostgreSQL
# (the database handler), so the limits hold while Redis is down. Username and
# address are separate parameters: either one reaching the limit locks it out.
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
AXES_FAILURE_LIMIT: int = env.int("AXES_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("AXES_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "core.views.locked_out"

# --- Content-Security-Policy (django-csp) -------------------------------------
# No inline script anywhere: every script is a static file, so script-src is
# 'self' alone and an injected <script> or on* handler never runs. Styles allow
# 'unsafe-inline': the API docs (Swagger UI, Redoc) set style attributes from
# their scripts, and a style cannot run code. Message images may come from any
# https host.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        # NONCE: only a page that asks for a nonce gets one in its header
        # (notifications' register_notify_callbacks tag puts it on its script tag).
        "script-src": ["'self'", NONCE],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:", "https:"],
        "font-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
# Where "/" sends a signed-in user (a URL name): the project picks the page,
# core's home view names no app. Unset or unknown: core's own home page.
MESSAGECENTER_HOME_URL: str = "messagecenter:inbox"

LANGUAGE_CODE = "en"
# Shipped languages; their compiled catalogues live in locale/ (make messages).
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Files served at the site's root by whitenoise (favicon.ico, which browsers
# ask for there whatever the page links).
WHITENOISE_ROOT = BASE_DIR / "static" / "root"
MEDIA_URL = "media/"
MEDIA_ROOT = env.path("MEDIA_ROOT", default=str(BASE_DIR / "media"))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# Bodies above this size are refused with 413 before any parsing.
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("DATA_UPLOAD_MAX_MEMORY_SIZE", default=1024 * 1024)

# --- REST -------------------------------------------------------------------
REST_FRAMEWORK = {
    # Token first: its WWW-Authenticate header makes missing credentials a 401.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["core.api.params.StrictJSONParser"],
    "EXCEPTION_HANDLER": "core.views.envelope_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "core.api.openapi.AutoSchema",
    # DRF's own throttles, counting in Django's cache (Redis); while Redis is
    # down the cache fails open (IGNORE_EXCEPTIONS above) and so do they.
    "DEFAULT_THROTTLE_CLASSES": [
        "rest_framework.throttling.AnonRateThrottle",
        "rest_framework.throttling.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "anon": env("THROTTLE_ANON", default="60/min"),
        "user": env("THROTTLE_USER", default="1200/min"),
    },
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Message centre API",
    "DESCRIPTION": "Announcements, bulletins, messages and notifications for millions of users.",
    "VERSION": "1.0.0",
    # Several answers have a "status": each set of choices gets its own name.
    "ENUM_NAME_OVERRIDES": {
        "MessageStatusEnum": "messagecenter.models.MessageStatus",
        "NotificationStatusEnum": "messagecenter.models.NotificationStatus",
    },
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Every <id:...> path parameter: the spelling core.api.fields.IdConverter
    # accepts (core.api.fields.ID_PATTERN; a test holds the two equal).
    "PATH_CONVERTER_OVERRIDES": {
        "id": {"type": "string", "pattern": "^[1-9][0-9]{0,18}$", "description": "An id as the API returned it."}
    },
}

# --- The message centre's own tunables (MESSAGECENTER_*) ------------------------
MESSAGECENTER_KEY_PREFIX: str = env("MESSAGECENTER_KEY_PREFIX", default="mc:")
MESSAGECENTER_PUSH_THRESHOLD: int = env.int("MESSAGECENTER_PUSH_THRESHOLD", default=5000)
MESSAGECENTER_PAGE_SIZE: int = env.int("MESSAGECENTER_PAGE_SIZE", default=20)
MESSAGECENTER_MAX_PAGE_SIZE: int = env.int("MESSAGECENTER_MAX_PAGE_SIZE", default=100)
MESSAGECENTER_BITMAP_CHUNK_USERS: int = env.int("MESSAGECENTER_BITMAP_CHUNK_USERS", default=2**20)
# Users per announcement read-state chunk (notices/readmodel.py): a bitmap holds at
# most this many bits, so 2**15 keeps any read bitmap at 4 KiB (a lone reader with a
# high id made a 128 KiB key at 2**20). Each chunk in use also keeps its own copy of
# the platform's announcement index, so much smaller chunks cost more than they save.
# Redis records the size its read state was written with: changing it makes the
# read model rebuild from PostgreSQL (notices.readmodel.layout_adopt), never misread.
MESSAGECENTER_NOTICE_CHUNK_USERS: int = env.int("MESSAGECENTER_NOTICE_CHUNK_USERS", default=2**15)
MESSAGECENTER_MAX_USER_ID: int = env.int("MESSAGECENTER_MAX_USER_ID", default=2**32 - 1)
MESSAGECENTER_FANOUT_CHUNK: int = env.int("MESSAGECENTER_FANOUT_CHUNK", default=1000)
MESSAGECENTER_NOTIFICATION_TTL: int = env.int("MESSAGECENTER_NOTIFICATION_TTL", default=60 * 60 * 24 * 7)
MESSAGECENTER_INBOX_MAX_ITEMS: int = env.int("MESSAGECENTER_INBOX_MAX_ITEMS", default=10000)
# The most inbox members one Redis call settles, all its steps together (expired, over the
# cap, evicted by a fan-out, woken, walked into the unread zsets): work left over is done by
# the next calls (docs/ARCHITECTURE.md). 100 members cost a call about 0.5-1 ms of Redis time
# here (a few µs each); the cap keeps a step's variadic commands within what Lua can unpack.
MESSAGECENTER_INBOX_SETTLE_STEP: int = env.int("MESSAGECENTER_INBOX_SETTLE_STEP", default=100)
if not 1 <= MESSAGECENTER_INBOX_SETTLE_STEP <= 1000:
    raise ImproperlyConfigured("MESSAGECENTER_INBOX_SETTLE_STEP must be between 1 and 1000.")
MESSAGECENTER_AUTH_CACHE_TTL: int = env.int("MESSAGECENTER_AUTH_CACHE_TTL", default=300)
# API tokens (accounts/tokens.py): how long a token issued at sign-in answers.
MESSAGECENTER_TOKEN_TTL_DAYS: int = env.int("MESSAGECENTER_TOKEN_TTL_DAYS", default=30)
if not 1 <= MESSAGECENTER_TOKEN_TTL_DAYS <= 3650:
    raise ImproperlyConfigured("MESSAGECENTER_TOKEN_TTL_DAYS must be between 1 and 3650.")
# Read-through entries (core/readthrough.py): TTL spread (+/- a fraction), how long a
# stale entry is served while one request refreshes it, how long a miss (bad token,
# unknown id) is remembered, the fill lock's lease, an invalidation tombstone's life.
MESSAGECENTER_CACHE_JITTER: float = env.float("MESSAGECENTER_CACHE_JITTER", default=0.1)
MESSAGECENTER_CACHE_STALE_SECONDS: float = env.float("MESSAGECENTER_CACHE_STALE_SECONDS", default=60.0)
MESSAGECENTER_CACHE_NULL_SECONDS: float = env.float("MESSAGECENTER_CACHE_NULL_SECONDS", default=30.0)
MESSAGECENTER_CACHE_FILL_LEASE_MS: int = env.int("MESSAGECENTER_CACHE_FILL_LEASE_MS", default=2000)
MESSAGECENTER_CACHE_TOMBSTONE_SECONDS: float = env.float("MESSAGECENTER_CACHE_TOMBSTONE_SECONDS", default=60.0)
if not 0 <= MESSAGECENTER_CACHE_JITTER < 1:
    raise ImproperlyConfigured("MESSAGECENTER_CACHE_JITTER must be at least 0 and below 1.")
if (
    MESSAGECENTER_CACHE_FILL_LEASE_MS < 1
    or MESSAGECENTER_CACHE_TOMBSTONE_SECONDS * 1000 <= 2 * MESSAGECENTER_CACHE_FILL_LEASE_MS
):
    raise ImproperlyConfigured(
        "MESSAGECENTER_CACHE_TOMBSTONE_SECONDS must outlast two fill leases (MESSAGECENTER_CACHE_FILL_LEASE_MS): "
        "a fill that read the database before an invalidation must still find its tombstone."
    )
# Activity bitmaps (insight/activity.py): record daily active users; days kept.
MESSAGECENTER_ACTIVITY_ENABLED: bool = env.bool("MESSAGECENTER_ACTIVITY_ENABLED", default=True)
MESSAGECENTER_ACTIVITY_KEEP_DAYS: int = env.int("MESSAGECENTER_ACTIVITY_KEEP_DAYS", default=400)
MESSAGECENTER_REDIS_CLUSTER_URL: str = env("MESSAGECENTER_REDIS_CLUSTER_URL", default="")
MESSAGECENTER_LIVE_STREAM_SECONDS: float = env.float("MESSAGECENTER_LIVE_STREAM_SECONDS", default=55.0)
MESSAGECENTER_LIVE_HEARTBEAT_SECONDS: float = env.float("MESSAGECENTER_LIVE_HEARTBEAT_SECONDS", default=15.0)
# With Redis down the inbox answers from PostgreSQL: newest pull messages and
# bulletins scanned per request (pushed items are read by the user's own rows).
MESSAGECENTER_FALLBACK_SCAN_LIMIT: int = env.int("MESSAGECENTER_FALLBACK_SCAN_LIMIT", default=5000)
# Items younger than this may still wait for their delivery task: check_redis skips them.
MESSAGECENTER_CHECK_GRACE_SECONDS: float = env.float("MESSAGECENTER_CHECK_GRACE_SECONDS", default=60.0)

# --- Webhooks (webhooks/services.py) ----------------------------------------------
# Seconds before each retry of a failed delivery (exponential: 10 s ... ~40 min);
# one attempt more than entries, then the delivery is marked failed.
WEBHOOK_RETRY_DELAYS: list[float] = [
    float(x) for x in env.list("WEBHOOK_RETRY_DELAYS", default=["10", "60", "300", "1800"])
]
# Failed attempts in a row after which an endpoint is switched off.
WEBHOOK_DISABLE_AFTER_FAILURES: int = env.int("WEBHOOK_DISABLE_AFTER_FAILURES", default=15)
WEBHOOK_TIMEOUT_SECONDS: float = env.float("WEBHOOK_TIMEOUT_SECONDS", default=5.0)
# Certificates of https receivers are checked against this CA bundle (a PEM
# file) instead of the system's and certifi's, e.g. for receivers under a
# company CA. Deliveries ignore SSL_CERT_FILE and proxies from the environment.
WEBHOOK_CA_BUNDLE: str = env("WEBHOOK_CA_BUNDLE", default="")
# Loopback, private, link-local and reserved addresses are refused unless this is on
# (a receiver on the same host or network, and the tests' loopback receiver).
WEBHOOK_ALLOW_PRIVATE_ADDRESSES: bool = env.bool("WEBHOOK_ALLOW_PRIVATE_ADDRESSES", default=False)
# How often beat hands due webhook deliveries (retries, broker outages) to the workers.
WEBHOOK_RELAY_SECONDS: float = env.float("WEBHOOK_RELAY_SECONDS", default=10.0)
# A handed-over delivery not finished within this is handed over again.
WEBHOOK_LEASE_SECONDS: float = env.float("WEBHOOK_LEASE_SECONDS", default=120.0)
# A pending delivery that failed this many times in a row raises delivery.failed once.
MESSAGECENTER_DELIVERY_FAILED_EVENT_ATTEMPTS: int = env.int("MESSAGECENTER_DELIVERY_FAILED_EVENT_ATTEMPTS", default=5)
CELERY_BEAT_SCHEDULE["core-tokens-delete-expired"] = {"task": "core.tokens_delete_expired", "schedule": 24 * 60 * 60}
CELERY_BEAT_SCHEDULE["core-webhook-relay"] = {"task": "core.webhook_relay", "schedule": WEBHOOK_RELAY_SECONDS}

# --- Scheduled sends ------------------------------------------------------------
# How often beat sends the messages and notifications whose send_at has passed.
MESSAGECENTER_SCHEDULED_SECONDS: float = env.float("MESSAGECENTER_SCHEDULED_SECONDS", default=15.0)
CELERY_BEAT_SCHEDULE["messagecenter-send-scheduled"] = {
    "task": "messagecenter.send_scheduled",
    "schedule": MESSAGECENTER_SCHEDULED_SECONDS,
}

# --- Metrics (insight/metrics.py, GET /metrics) ----------------------------------
# A scrape needs "Authorization: Bearer <METRICS_TOKEN>" or a client address in
# METRICS_ALLOWED_IPS (addresses or networks); with neither set, /metrics is 403.
# Under gunicorn set PROMETHEUS_MULTIPROC_DIR (an empty directory) for all workers.
METRICS_TOKEN: str = env("METRICS_TOKEN", default="")
METRICS_ALLOWED_IPS: list[str] = env.list("METRICS_ALLOWED_IPS", default=[])

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", default="INFO")},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}

# --- E-mail and digests -----------------------------------------------------------
# Where mail goes: EMAIL_URL (django-environ: smtp://user:pass@host:587, smtp+tls://...,
# consolemail://), else EMAIL_HOST and friends for SMTP, else the console (make run).
if env("EMAIL_URL", default=""):
    globals().update(env.email_url("EMAIL_URL"))
elif env("EMAIL_HOST", default=""):
    EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    EMAIL_HOST: str = env("EMAIL_HOST")
    EMAIL_PORT: int = env.int("EMAIL_PORT", default=25)
    EMAIL_HOST_USER: str = env("EMAIL_HOST_USER", default="")
    EMAIL_HOST_PASSWORD: str = env("EMAIL_HOST_PASSWORD", default="")
    EMAIL_USE_TLS: bool = env.bool("EMAIL_USE_TLS", default=False)
    EMAIL_USE_SSL: bool = env.bool("EMAIL_USE_SSL", default=False)
else:
    EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
EMAIL_TIMEOUT: int = env.int("EMAIL_TIMEOUT", default=10)
DEFAULT_FROM_EMAIL: str = env("DEFAULT_FROM_EMAIL", default="Message centre <noreply@localhost>")
# Absolute links in e-mails (the inbox, the unsubscribe link) start with this.
MESSAGECENTER_SITE_URL: str = env("MESSAGECENTER_SITE_URL", default="http://localhost:8000")
# The digest of users who never chose ("off", "daily" or "weekly"): daily unless
# the operator says otherwise. It applies to those users at every run, so "off"
# stops their digests; users who chose keep their choice.
MESSAGECENTER_DIGEST_DEFAULT: str = env("MESSAGECENTER_DIGEST_DEFAULT", default="daily").strip().lower()
if MESSAGECENTER_DIGEST_DEFAULT not in ("off", "daily", "weekly"):
    raise ImproperlyConfigured(
        f"MESSAGECENTER_DIGEST_DEFAULT must be off, daily or weekly, not {MESSAGECENTER_DIGEST_DEFAULT!r}."
    )
# Only unread items at least this old are worth an e-mail (the inbox shows the rest).
MESSAGECENTER_DIGEST_MIN_AGE_HOURS: float = env.float("MESSAGECENTER_DIGEST_MIN_AGE_HOURS", default=24.0)
# Items listed in one e-mail (the total unread count is always given).
MESSAGECENTER_DIGEST_MAX_ITEMS: int = env.int("MESSAGECENTER_DIGEST_MAX_ITEMS", default=20)
# Users looked at per query and per claim.
MESSAGECENTER_DIGEST_BATCH: int = env.int("MESSAGECENTER_DIGEST_BATCH", default=200)
MESSAGECENTER_DIGEST_SECONDS: float = env.float("MESSAGECENTER_DIGEST_SECONDS", default=15 * 60.0)
CELERY_BEAT_SCHEDULE["messagecenter-digests-send"] = {
    "task": "messagecenter.digests_send",
    "schedule": MESSAGECENTER_DIGEST_SECONDS,
}

# --- Channels: Web Push and e-mail when still unread (messagecenter/services/channels/) ----
# VAPID (RFC 8292): the private key as base64url of its 32 raw bytes (or PEM); without
# it the file below (make run writes one: manage.py vapid_keys --write), else a key
# derived from SECRET_KEY (rotating SECRET_KEY then changes it: set one). The subject tells push services whom
# to contact: a mailto: or https: URL.
MESSAGECENTER_VAPID_PRIVATE_KEY: str = env("MESSAGECENTER_VAPID_PRIVATE_KEY", default="")
MESSAGECENTER_VAPID_KEY_FILE: str = env("MESSAGECENTER_VAPID_KEY_FILE", default=str(BASE_DIR / ".vapid_private_key"))
MESSAGECENTER_VAPID_SUBJECT: str = env("MESSAGECENTER_VAPID_SUBJECT", default="mailto:webpush@localhost")
# How long a push service keeps a push for an offline device (never past the item's expiry).
MESSAGECENTER_PUSH_TTL_SECONDS: int = env.int("MESSAGECENTER_PUSH_TTL_SECONDS", default=24 * 60 * 60)
MESSAGECENTER_PUSH_TIMEOUT_SECONDS: float = env.float("MESSAGECENTER_PUSH_TIMEOUT_SECONDS", default=10.0)
# Pushes one fan-out chunk has in flight at once (one event loop: a push is mostly a wait on the network).
MESSAGECENTER_PUSH_CONCURRENCY: int = env.int("MESSAGECENTER_PUSH_CONCURRENCY", default=16)
# Users (or, for everyone, subscription ids) per push fan-out chunk.
MESSAGECENTER_PUSH_CHUNK: int = env.int("MESSAGECENTER_PUSH_CHUNK", default=1000)
# Devices kept per user: a new subscription past it removes the oldest.
MESSAGECENTER_PUSH_MAX_PER_USER: int = env.int("MESSAGECENTER_PUSH_MAX_PER_USER", default=20)
# Tests only: accept http:// push endpoints and push to loopback or private addresses
# (the tests' own push service). Off, endpoints are https and must resolve to public
# addresses (the webhooks' rule), so a subscription cannot make the server POST inward.
MESSAGECENTER_PUSH_ALLOW_LOCAL_ENDPOINTS: bool = env.bool("MESSAGECENTER_PUSH_ALLOW_LOCAL_ENDPOINTS", default=False)
# At most this many pushes and e-mails beyond the inbox reach one user per hour; the rest
# wait for the digest.
MESSAGECENTER_CHANNEL_MAX_PER_HOUR: int = env.int("MESSAGECENTER_CHANNEL_MAX_PER_HOUR", default=10)
# The e-mail scan: how often beat runs it, users looked at per batch (one claim each),
# and how long one run may take before it leaves the rest to the next.
MESSAGECENTER_CHANNEL_SCAN_SECONDS: float = env.float("MESSAGECENTER_CHANNEL_SCAN_SECONDS", default=30.0)
MESSAGECENTER_CHANNEL_SCAN_BATCH: int = env.int("MESSAGECENTER_CHANNEL_SCAN_BATCH", default=5000)
MESSAGECENTER_CHANNEL_SCAN_BUDGET_SECONDS: float = env.float("MESSAGECENTER_CHANNEL_SCAN_BUDGET_SECONDS", default=25.0)
CELERY_BEAT_SCHEDULE["messagecenter-channels-email-scan"] = {
    "task": "messagecenter.channels_email_scan",
    "schedule": MESSAGECENTER_CHANNEL_SCAN_SECONDS,
}
CELERY_BEAT_SCHEDULE["messagecenter-channels-quiet-release"] = {
    "task": "messagecenter.channels_quiet_release",
    "schedule": 60.0,
}
# Push retries ride the webhooks' relay (webhooks.services.deliveries_relay), as often.
CELERY_BEAT_SCHEDULE["messagecenter-push-relay"] = {
    "task": "messagecenter.push_relay",
    "schedule": WEBHOOK_RELAY_SECONDS,
}

# --- django-notifications-hq's drop-in (compat/notifications) ------------------------
# Each notify.send is also one message in its recipients' inboxes, of this
# category; "message" is the one kind the message centre addresses to a chosen
# set of users (typed notifications go to the subscribers of a type and scope).
NOTIFICATIONS_INBOX_ENABLED: bool = env.bool("NOTIFICATIONS_INBOX_ENABLED", default=True)
NOTIFICATIONS_INBOX_CATEGORY: str = env("NOTIFICATIONS_INBOX_CATEGORY", default="interaction")
NOTIFICATIONS_INBOX_KIND: str = env("NOTIFICATIONS_INBOX_KIND", default="message")
# Changes made through the app reach the inbox at once; how often (seconds, per
# user) a sync also looks for rows rewritten by plain UPDATEs or left waiting.
NOTIFICATIONS_INBOX_RESCAN_SECONDS: float = env.float("NOTIFICATIONS_INBOX_RESCAN_SECONDS", default=30.0)
