"""The public-API gate bites: scripts/check_private.py flags a sample of each
pattern it knows (a library's internals, a private write, a library class
changed from inside, patching, a route in front of Django), passes a clean
sample, holds its allow-list to documented and current entries, and passes on
this repository."""

import importlib.util
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_private", ROOT / "scripts" / "check_private.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_private = _load_checker()


def hits(source: str, path: str = "core/sample.py") -> list[tuple[str, str]]:
    return [(hit.rule, hit.subject) for hit in check_private.check_source(path, textwrap.dedent(source))]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("cycle = getattr(send, '__self__', None)\n", ("known", "__self__")),
        ("cycle = send.__self__\n", ("known", "__self__")),
        ("sock = cycle.transport.get_extra_info('socket')\n", ("known", "transport")),
        ("paused = self.cycle.flow.write_paused\n", ("known", "write_paused")),
        ("chunked = cycle.chunked_encoding\n", ("known", "chunked_encoding")),
        ("waiting._asyncio_future_blocking = False\n", ("known", "_asyncio_future_blocking")),
        ("connection._parser.set_invalidation_push_handler(handler)\n", ("known", "_parser")),
        (
            """
            class C(Connection):
                def connect(self):
                    if self._sock:
                        return
            """,
            ("known", "_sock"),
        ),
        ("response._handler_class = Handler\n", ("known", "_handler_class")),
        ("raw = client.hget(channel.unacked_key, tag)\n", ("known", "unacked_key")),
        ("channel.qos.restore_by_tag(tag, client)\n", ("known", "restore_by_tag")),
        (
            """
            class Throttle(SimpleRateThrottle):
                def allow_request(self, request, view):
                    self.history = [0.0] * 3
                    return True
            """,
            ("known", "history"),
        ),
    ],
)
def test_known_internals_are_flagged(source: str, expected: tuple[str, str]) -> None:
    assert expected in hits(source)


@pytest.mark.parametrize(
    ("source", "subject"),
    [
        ("request._replica_scope = scope\n", "_replica_scope"),
        ("setattr(user, '_memo', 1)\n", "_memo"),
        ("NAME = '_memo'\n\n\ndef f(user):\n    setattr(user, NAME, 1)\n", "_memo"),
        ("del request._memo\n", "_memo"),
        ("delattr(request, '_memo')\n", "_memo"),
        ("counter._count += 1\n", "_count"),
    ],
)
def test_private_writes_to_other_objects_are_flagged(source: str, subject: str) -> None:
    assert ("private-write", subject) in hits(source)


@pytest.mark.parametrize(
    "source", ["storage = getattr(request, '_messages', None)\n", "if hasattr(request, '_cached_user'):\n    pass\n"]
)
def test_private_reads_spelled_as_strings_are_flagged(source: str) -> None:
    assert [rule for rule, _ in hits(source)] == ["private-read"]


def test_a_library_class_changed_from_inside_is_flagged() -> None:
    found = hits(
        """
        from django.middleware.csrf import CsrfViewMiddleware
        from django_redis.pool import ConnectionFactory


        class Inline:
            async def __acall__(self, request):
                return None


        class Csrf(Inline, CsrfViewMiddleware):
            pass


        class Factory(ConnectionFactory):
            def get_or_create_connection_pool(self, params):
                return self._pools.get(params["url"])
        """
    )
    assert ("library-private", "__acall__") in found
    assert ("library-private", "_pools") in found


@pytest.mark.parametrize(
    ("source", "subject"),
    [
        ("from unittest import mock\n", "unittest"),
        ("import unittest.mock\n", "unittest.mock"),
        ("from unittest.mock import patch\n\npatch('redis.Redis.get')\n", "patch"),
        ("def f(monkeypatch):\n    monkeypatch.setattr('a.b', 1)\n", "setattr"),
        ("from redis import Redis\n\nRedis.execute_command = lambda *a: None\n", "execute_command"),
        ("import redis.connection\n\nredis.connection.Connection.connect = lambda self: None\n", "connect"),
        ("from redis import Redis\n\nsetattr(Redis, 'get', None)\n", "get"),
    ],
)
def test_patching_is_flagged(source: str, subject: str) -> None:
    assert ("monkeypatch", subject) in hits(source)


@pytest.mark.parametrize(
    ("source", "subject"),
    [
        ("def app(scope):\n    return scope['path'] == '/x'\n", 'scope["path"]'),
        ("def app(scope):\n    return scope.get('path')\n", 'scope["path"]'),
        ("def app(environ):\n    return environ['PATH_INFO']\n", 'environ["PATH_INFO"]'),
    ],
)
def test_routing_by_path_is_flagged(source: str, subject: str) -> None:
    assert ("route", subject) in hits(source)


def test_an_entry_point_serves_only_djangos_handler() -> None:
    wrapped = """
        from django.core.asgi import get_asgi_application
        from core.fast import FastRoutes

        django_application = get_asgi_application()
        application = FastRoutes(django_application, path="/api/v1/inbox/stream/")
        """
    assert ("route", "FastRoutes") in hits(wrapped, "config/asgi.py")
    assert ("route", "/api/v1/inbox/stream/") in hits(wrapped, "config/asgi.py")
    inline = "from django.core.wsgi import get_wsgi_application\n\napplication = Routes(get_wsgi_application())\n"
    assert ("route", "Routes") in hits(inline, "config/wsgi.py")
    rebuilt = "class Handler:\n    pass\n"
    assert ("route", "Handler") in hits(rebuilt, "config/asgi.py")


def test_a_clean_sample_passes() -> None:
    assert (
        hits(
            """
            import os
            from typing import Any

            from django.contrib import admin
            from django.core.asgi import get_asgi_application

            admin.site.site_header = "Message centre"
            os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
            django_application = get_asgi_application()


            async def lifespan(receive: Any, send: Any) -> None:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})


            async def application(scope: Any, receive: Any, send: Any) -> None:
                if scope["type"] == "lifespan":
                    await lifespan(receive, send)
                    return
                await django_application(scope, receive, send)
            """,
            "config/asgi.py",
        )
        == []
    )
    assert (
        hits(
            """
            from typing import Any

            from redis.connection import Connection


            class Breaker(Connection):
                def connect(self) -> None:
                    if self.is_connected:
                        return
                    self._failures = 0
                    super().connect()


            def describe(model: Any, user: Any) -> str:
                user.messagecenter_platforms = ("web",)
                return f"{model._meta.label} on {model._state.db} via {model._default_manager.name}"
            """
        )
        == []
    )


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return root


def test_the_allowlist_needs_documentation_and_current_entries(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"core/a.py": "waiting._asyncio_future_blocking = False\n", "core/b.py": "x = 1\n"})
    allowlist = tmp_path / "allow.toml"
    failures, _ = check_private.run(root, allowlist, ["core"])
    assert failures == [
        "core/a.py:1:1: known: ._asyncio_future_blocking: " + check_private.KNOWN["_asyncio_future_blocking"]
    ]

    allowlist.write_text('[[allowed]]\nfile = "core/a.py"\nattribute = "_asyncio_future_blocking"\n', encoding="utf-8")
    failures, _ = check_private.run(root, allowlist, ["core"])
    assert any("needs file, attribute and url" in failure for failure in failures)

    allowlist.write_text(
        '[[allowed]]\nfile = "core/a.py"\nattribute = "_asyncio_future_blocking"\nurl = "https://docs.python.org/3/"\n'
        '[[allowed]]\nfile = "core/b.py"\nattribute = "_gone"\nurl = "https://docs.python.org/3/"\n',
        encoding="utf-8",
    )
    failures, _ = check_private.run(root, allowlist, ["core"])
    assert failures == [f"{allowlist}: [[allowed]] core/b.py _gone: matches nothing (delete it)"]

    allowlist.write_text('[[temporary]]\nfile = "core/a.py"\nattributes = ["_asyncio_future_blocking"]\n')
    failures, waived = check_private.run(root, allowlist, ["core"])
    assert failures == []
    assert [(hit.path, hit.subject) for hit in waived] == [("core/a.py", "_asyncio_future_blocking")]


def test_this_repository_passes() -> None:
    failures, _ = check_private.run(ROOT, ROOT / "scripts" / "private_allowlist.toml", check_private.PRODUCT)
    assert failures == []
