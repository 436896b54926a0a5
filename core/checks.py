"""System checks of the project's own.

Django's deploy checks for the security, clickjacking and CSRF middleware
look for Django's own import paths in ``MIDDLEWARE``; the project lists
subclasses of them (core/middleware.py: the same hooks, run inline under
ASGI), so those three checks are silenced in the settings and asked here
again, of the classes rather than their names; and the checks of settings
that Django makes only when a middleware is installed by its name run again
with the project's classes named as the Django classes they extend.
"""

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Tags, Warning, register
from django.core.checks.security import base as security_base
from django.core.checks.security import csrf as security_csrf
from django.core.checks.security import sessions as security_sessions
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.csrf import CsrfViewMiddleware
from django.middleware.security import SecurityMiddleware
from django.test.utils import override_settings
from django.utils.module_loading import import_string

# Django's check id each class stands in for, and what it says.
_REQUIRED = (
    (SecurityMiddleware, "security.W001", "security settings (HSTS, nosniff, SSL redirect) have no effect"),
    (XFrameOptionsMiddleware, "security.W002", "pages are served without an X-Frame-Options header"),
    (CsrfViewMiddleware, "security.W003", "no cross-site request forgery protection"),
)


def _has_subclass(required: type) -> bool:
    for path in settings.MIDDLEWARE:
        try:
            middleware = import_string(path)
        except ImportError:
            continue
        if isinstance(middleware, type) and issubclass(middleware, required):
            return True
    return False


@register(Tags.security, deploy=True)
def middleware_present(app_configs: Any, **kwargs: Any) -> list[Warning]:
    return [
        Warning(f"No {required.__name__} (or a subclass) in MIDDLEWARE: {effect}.", id=f"core.{check_id}")
        for required, check_id, effect in _REQUIRED
        if not _has_subclass(required)
    ]


# Django's deploy checks that look at a setting only when its middleware is
# installed, by name (HSTS, SSL redirect, nosniff, X-Frame-Options DENY,
# referrer and opener policies, secure CSRF and session cookies). Under the
# project's names they would pass whatever the settings say.
_BY_NAME = (
    security_base.check_sts,
    security_base.check_sts_include_subdomains,
    security_base.check_sts_preload,
    security_base.check_content_type_nosniff,
    security_base.check_ssl_redirect,
    security_base.check_xframe_deny,
    security_base.check_referrer_policy,
    security_base.check_cross_origin_opener_policy,
    security_csrf.check_csrf_cookie_secure,
    security_sessions.check_session_cookie_secure,
    security_sessions.check_session_cookie_httponly,
)


def _django_path(path: str) -> str:
    """The import path of the Django class a middleware extends (itself if none)."""
    try:
        middleware = import_string(path)
    except ImportError:
        return path
    if not isinstance(middleware, type):
        return path
    for base in middleware.__mro__:
        if base.__module__.startswith("django."):
            return f"{base.__module__}.{base.__qualname__}"
    return path


@register(Tags.security, deploy=True)
def settings_of_subclassed_middleware(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """Django's checks above, asked again with each middleware named by the
    Django class it extends; what they find that Django's own run did not."""
    as_django = [_django_path(path) for path in settings.MIDDLEWARE]
    if as_django == list(settings.MIDDLEWARE):
        return []
    found: list[CheckMessage] = []
    for check in _BY_NAME:
        plain = check(app_configs)
        with override_settings(MIDDLEWARE=as_django):
            named = check(app_configs)
        found.extend(message for message in named if message not in plain)
    return found
