"""Operator permissions for ``/api/v1/manage/``: staff with model permissions."""

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request


class IsOperator(BasePermission):
    """Staff users holding every permission the view lists in ``required_permissions``
    (a superuser holds all). Unauthenticated callers get 401, others 403.

    A view whose path also reads (GET next to POST, PATCH or DELETE) names the
    read's permissions in ``read_permissions``; they apply to safe methods."""

    message = "Operator permissions are required."

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated and user.is_staff):
            return False
        if request.method in SAFE_METHODS and hasattr(view, "read_permissions"):
            required: tuple[str, ...] = tuple(view.read_permissions)
        else:
            required = tuple(getattr(view, "required_permissions", ()))
        return bool(user.has_perms(required))
