"""The apps' rebuild commands, which ``manage.py rebuild_redis`` runs in turn.

Each app owns a management command that restores its part of the Redis read
model from PostgreSQL and registers its name here from ``AppConfig.ready()``,
so core runs them all without naming an app.
"""

# Command names in registration order (INSTALLED_APPS order): an app's
# structures are rebuilt after those of the apps it builds on.
_commands: list[str] = []


def register(command: str) -> None:
    if command not in _commands:
        _commands.append(command)


def rebuild_commands() -> list[str]:
    return list(_commands)
