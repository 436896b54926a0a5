"""``{% redis_check_last as run %}``: the newest check_redis run, for the admin index panel."""

from django import template

from durability.drift import check_run_last
from durability.models import RedisCheckRun

register = template.Library()


@register.simple_tag
def redis_check_last() -> RedisCheckRun | None:
    return check_run_last()
