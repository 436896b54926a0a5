"""System checks of the project's own.

Django's deploy checks for the security, clickjacking and CSRF middleware
look for Django's own import paths in ``MIDDLEWARE``; the project lists
subclasses of them (core/middleware.py: the same hooks, run inline under
ASGI), so those three checks are silenced in the settings and asked here
again, of the classes rather than their names.
"""

from typing import Any

from django.conf import settings
from django.core.checks import Tags, Warning, register
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.csrf import CsrfViewMiddleware
from django.middleware.security import SecurityMiddleware
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
