"""A small world for the security tests: two users with items addressed to
each of them only, one group, one announcement per platform, a typed
notification per subscribed scope. Built through the services, as the API
would build it, so PostgreSQL and the read model agree."""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.apps import apps
from django.conf import settings
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import override_settings

from accounts.services import user_set_platforms
from messagecenter import services as mc
from messagecenter.models import Bulletin, Message, MessageType, Notification, Subscription, UserGroup
from notices.models import Announcement
from notices.services import announcement_create
from tests.factories import StaffFactory, SuperuserFactory, UserFactory
from webhooks.models import WebhookEndpoint
from webhooks.services import webhook_endpoint_create

# Webhook URLs the security tests register: nothing listens there.
LOOPBACK_HOOK = "http://127.0.0.1:9/hook"


@dataclass
class World:
    operator: Any
    alice: Any  # the recipient: every "alice_*" item is addressed to her (and not to mallory)
    mallory: Any  # the outsider: on the user platform, in no group, subscribed to nothing
    alice_group: UserGroup
    alice_message: Message  # pushed to alice alone
    group_message: Message  # pushed to alice's group
    pull_message: Message  # pulled by alice's group (delivery "pull")
    alice_bulletin: Bulletin  # shown to alice's group
    alice_notification: Notification  # alice subscribes to (shipment, warehouse-1)
    customer_announcement: Announcement  # customer platform (alice is on it, mallory is not)
    public_announcement: Announcement  # user platform: both see it
    message_type: MessageType
    alice_subscription: Subscription
    scheduled_message: Message  # to alice, a day ahead: still editable
    scheduled_notification: Notification  # (shipment, warehouse-1), a day ahead
    self_service_type: MessageType  # users may subscribe to it themselves
    webhook: WebhookEndpoint  # on a closed loopback port, for a rare event only


def item_id(obj: Message | Bulletin | Notification) -> str:
    """The inbox id of an item (``m``/``b``/``n`` + primary key)."""
    prefix = {Message: "m", Bulletin: "b", Notification: "n"}[type(obj)]
    return f"{prefix}{obj.pk}"


def staff_with(*perms: str, username: str) -> Any:
    """A staff user holding exactly these model permissions (``app.codename``)."""
    user = StaffFactory(username=username)
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return user


def build_world() -> World:
    operator = SuperuserFactory(username="olivia-operator")
    alice = UserFactory(username="alice")
    mallory = UserFactory(username="mallory")
    user_set_platforms(user=alice, platforms=["user", "customer"])
    user_set_platforms(user=mallory, platforms=["user"])
    group = mc.user_group_create(name="alice-only")
    mc.user_group_add_members(group=group, user_ids=[alice.pk])
    now = datetime.now(UTC)
    alice_message = mc.message_send(
        sender=operator, category="transaction", title="For alice", body_html="<p>yours</p>", user_ids=[alice.pk]
    )
    group_message = mc.message_send(
        sender=operator, category="system", title="For the group", body_html="<p>group</p>", group_ids=[group.pk]
    )
    with override_settings(MESSAGECENTER_PUSH_THRESHOLD=0):
        pull_message = mc.message_send(
            sender=operator, category="promotion", title="Pulled", body_html="<p>pull</p>", group_ids=[group.pk]
        )
    bulletin = mc.bulletin_create(
        title="Group bulletin", body_html="<p>b</p>", display_time=now - timedelta(minutes=1), group_ids=[group.pk]
    )
    message_type = mc.message_type_create(code="shipment", name="Shipments")
    subscription = mc.subscription_create(message_type="shipment", scope="warehouse-1", user_id=alice.pk)
    mc.subscription_create(message_type="shipment", scope="warehouse-2", user_id=operator.pk)
    notification = mc.notification_send(
        message_type="shipment", scope="warehouse-1", title="Parcel", body_html="<p>arrived</p>"
    )
    customer = announcement_create(
        author=operator, title="Customers only", body_html="<p>c</p>", platforms=["customer"], publish_at=None
    )
    public = announcement_create(
        author=operator, title="Everyone", body_html="<p>u</p>", platforms=["user"], publish_at=None
    )
    scheduled_message = mc.message_send(
        sender=operator,
        category="system",
        title="Tomorrow",
        body_html="<p>later</p>",
        user_ids=[alice.pk],
        send_at=now + timedelta(days=1),
    )
    scheduled_notification = mc.notification_schedule(
        message_type="shipment",
        scope="warehouse-1",
        title="Tomorrow's parcel",
        body_html="<p>soon</p>",
        send_at=now + timedelta(days=1),
    )
    self_service_type = mc.message_type_create(code="weather", name="Weather", self_service=True)
    # Port 9 (discard) on loopback: should a delivery ever be attempted, it
    # leaves nothing but a refused connection on this machine.
    with override_settings(WEBHOOK_ALLOW_PRIVATE_ADDRESSES=True):
        webhook = webhook_endpoint_create(url=LOOPBACK_HOOK, events=["delivery.failed"], description="ops")
    return World(
        operator=operator,
        alice=alice,
        mallory=mallory,
        alice_group=group,
        alice_message=Message.objects.get(pk=alice_message.pk),
        group_message=Message.objects.get(pk=group_message.pk),
        pull_message=Message.objects.get(pk=pull_message.pk),
        alice_bulletin=bulletin,
        alice_notification=Notification.objects.get(pk=notification.pk),
        customer_announcement=customer,
        public_announcement=public,
        message_type=message_type,
        alice_subscription=subscription,
        scheduled_message=Message.objects.get(pk=scheduled_message.pk),
        scheduled_notification=Notification.objects.get(pk=scheduled_notification.pk),
        self_service_type=self_service_type,
        webhook=webhook,
    )


def _table_json(model: Any) -> str:
    """A select of one label parameter and the model's rows (its watched columns) as JSON, in key order."""
    quote = connection.ops.quote_name
    order = ", ".join(f"t.{quote(f.column)}" for f in model._meta.pk_fields)  # a composite key's columns too
    rows = f"json_agg(t ORDER BY {order})::text"
    picked = ", ".join(quote(f.column) for f in _watched_fields(model))
    return f"SELECT %s, (SELECT coalesce({rows}, '') FROM (SELECT {picked} FROM {quote(model._meta.db_table)}) t)"  # noqa: S608


# Models whose rows an attempt must not create, change or delete (core's
# include the API tokens).
_WATCHED = ("core", "audit", "insight", "accounts", "webhooks", "live", "notices", "messagecenter")
# Columns any authenticated request may write, refused ones too: a token's
# "last used" time, written when authentication reads the token from PostgreSQL.
_BOOKKEEPING = {"accounts.ApiToken": frozenset({"last_used_at"})}


def _watched_fields(model: Any) -> list[Any]:
    skipped = _BOOKKEEPING.get(model._meta.label, frozenset())
    # A composite primary key is a field without a column of its own (its columns are fields too).
    return [f for f in model._meta.concrete_fields if f.name not in skipped and f.column]


def db_state() -> dict[str, Any]:
    """Every row of the project's tables (ordered), so any write shows up in a comparison."""
    models = [model for label in _WATCHED for model in apps.get_app_config(label).get_models()]
    if connection.vendor == "postgresql":
        # One round trip for every table: the tests take this snapshot after
        # each of thousands of refused requests. Only quoted table and column
        # names of the models are formatted in; the labels are parameters.
        parts = [_table_json(m) for m in models]
        with connection.cursor() as cursor:
            cursor.execute(" UNION ALL ".join(parts), [m._meta.label for m in models])
            return dict(cursor.fetchall())
    state: dict[str, Any] = {}
    for model in models:
        fields = [f.attname for f in _watched_fields(model)]
        # Every watched model has Django's default manager, which type[Model] does not show.
        state[model._meta.label] = [tuple(map(repr, row)) for row in model.objects.order_by("pk").values_list(*fields)]  # type: ignore[attr-defined]
    return state


# Read-through caches of PostgreSQL that any authenticated request may fill,
# the day's activity bitmap, which any authenticated request may set a bit in,
# and the throttles' windows, which count every request, refused ones too.
_CACHE_PARTS = (":auth:", ":user:platforms:", ":activity:", ":throttle:")


_READ = {
    "string": lambda pipe, key: pipe.get(key),
    "hash": lambda pipe, key: pipe.hgetall(key),
    "zset": lambda pipe, key: pipe.zrange(key, 0, -1, withscores=True),
    "set": lambda pipe, key: pipe.smembers(key),
    "list": lambda pipe, key: pipe.lrange(key, 0, -1),
}


def redis_state(redis: Any) -> dict[str, Any]:
    """Every read-model key with its type and content (TTLs aside)."""
    prefix = str(settings.MESSAGECENTER_KEY_PREFIX)
    keys = []
    # Django's cache may share the database: read-model keys only.
    for raw in redis.scan_iter(match=prefix + "*", count=1000):
        key = raw.decode() if isinstance(raw, bytes) else raw
        if not any(part in ":" + key for part in _CACHE_PARTS):
            keys.append(key)
    # Two pipelined round trips (types, then contents) rather than two per key.
    pipe = redis.pipeline(transaction=False)
    for key in keys:
        pipe.type(key)
    kinds = [kind.decode() if isinstance(kind, bytes) else kind for kind in pipe.execute()]
    pipe = redis.pipeline(transaction=False)
    for key, kind in zip(keys, kinds, strict=True):
        _READ.get(kind, lambda pipe, key: pipe.type(key))(pipe, key)
    state: dict[str, Any] = {}
    for key, kind, value in zip(keys, kinds, pipe.execute(), strict=True):
        if kind in ("hash", "set"):
            value = sorted(value.items() if kind == "hash" else value)
        elif kind not in _READ:
            value = kind
        state[key] = (kind, value)
    return state


def warm_up(client: Any) -> None:
    """Read the caller's own lists and counts once, so read-model structures
    built lazily on a first read exist before a snapshot (a first read may
    build them; that is not a write a refused request made)."""
    for path in ("/api/v1/inbox/", "/api/v1/inbox/counts/", "/api/v1/announcements/", "/api/v1/announcements/counts/"):
        assert client.get(path).status_code == 200, path
