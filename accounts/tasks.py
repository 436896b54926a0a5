"""Celery adapters of the accounts app."""

from celery import shared_task

from accounts.tokens import tokens_delete_expired


@shared_task(name="core.tokens_delete_expired")
def tokens_delete_expired_task() -> int:
    """Expired tokens already answer 401; their rows leave the table daily."""
    return tokens_delete_expired()
