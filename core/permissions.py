"""Operator permissions for ``/api/v1/manage/``: staff with model permissions."""

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request


class IsOperator(BasePermission):
    """Staff users holding every permission the view lists in ``required_permissions``
    (a superuser holds all). Unauthenticated callers get 401, others 403."""

    message = "Operator permissions are required."

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated and user.is_staff):
            return False
        required: tuple[str, ...] = tuple(getattr(view, "required_permissions", ()))
        return bool(user.has_perms(required))
