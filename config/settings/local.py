"""Local development: DEBUG on unless told otherwise, embedded defaults allowed."""

from config.settings.base import *  # noqa: F403
from config.settings.base import env

DEBUG = env.bool("DEBUG", default=True)
