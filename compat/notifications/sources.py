"""A django-notifications-hq database to import from, read with plain SQL:
one of DATABASES (any backend Django has), or a database URL (SQLite or
PostgreSQL) opened read-only with the driver itself, so the project's
settings need no entry for a database used once."""

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import environ
import psycopg
from django.conf import settings
from django.db import DatabaseError, connections


class SourceError(Exception):
    """The source cannot be opened or read as an incumbent's database (the message says why)."""


class Source(Protocol):
    name: str

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run ``sql`` (``%s`` placeholders, double-quoted names) and return every row."""
        ...

    def columns(self, table: str) -> list[str]:
        """The table's column names (SourceError when there is no such table)."""
        ...

    def close(self) -> None: ...


class AliasSource:
    """One of the project's DATABASES."""

    def __init__(self, alias: str) -> None:
        if alias not in connections:
            raise SourceError(f"No database {alias!r} in DATABASES (known: {', '.join(connections)}).")
        self.name = f"DATABASES[{alias!r}]"
        self._connection = connections[alias]

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            with self._connection.cursor() as cursor:
                cursor.execute(sql, list(params))
                return list(cursor.fetchall())
        except DatabaseError as exc:
            raise SourceError(f"{self.name}: {exc}") from exc

    def columns(self, table: str) -> list[str]:
        try:
            with self._connection.cursor() as cursor:
                if table not in self._connection.introspection.table_names(cursor):
                    raise SourceError(f"{self.name} has no table {table}.")
                return [c.name for c in self._connection.introspection.get_table_description(cursor, table)]
        except DatabaseError as exc:
            raise SourceError(f"{self.name}: {exc}") from exc

    def close(self) -> None:
        """The connection is Django's: it closes it with the others."""


class SqliteSource:
    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise SourceError(f"No SQLite database at {path}.")
        self.name = str(path)
        try:
            # Read-only: an import never writes to the database it reads.
            self._db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        except sqlite3.Error as exc:
            raise SourceError(f"{path}: {exc}") from exc

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return list(self._db.execute(sql.replace("%s", "?"), list(params)).fetchall())
        except sqlite3.Error as exc:
            raise SourceError(f"{self.name}: {exc}") from exc

    def columns(self, table: str) -> list[str]:
        found = self.rows("SELECT name FROM pragma_table_info(%s)", [table])
        if not found:
            raise SourceError(f"{self.name} has no table {table}.")
        return [str(row[0]) for row in found]

    def close(self) -> None:
        self._db.close()


class PostgresSource:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.name = f"postgres://{parts.hostname or ''}{parts.path}"
        try:
            self._db = psycopg.connect(url, autocommit=True)
            self._db.read_only = True
        except psycopg.Error as exc:
            raise SourceError(f"{self.name}: {exc}") from exc

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            with self._db.cursor() as cursor:
                cursor.execute(sql, list(params))
                return list(cursor.fetchall())
        except psycopg.Error as exc:
            raise SourceError(f"{self.name}: {exc}") from exc

    def columns(self, table: str) -> list[str]:
        found = self.rows(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_name = %s AND table_schema = current_schema()",
            [table],
        )
        if not found:
            raise SourceError(f"{self.name} has no table {table}.")
        return [str(row[0]) for row in found]

    def close(self) -> None:
        self._db.close()


def _same_place(config: dict[str, Any], other: dict[str, Any]) -> bool:
    keys = ("ENGINE", "NAME", "HOST", "PORT")
    norm = [tuple(str(c.get(k) or "") for k in keys) for c in (config, other)]
    return norm[0] == norm[1]


def is_project_database(*, alias: str | None = None, url: str | None = None) -> bool:
    """Does the alias or URL name the project's own (default) database?"""
    databases = settings.DATABASES
    default = databases["default"]
    if alias is not None:
        return alias == "default" or (alias in databases and _same_place(databases[alias], default))
    if url is None:
        return False
    return _same_place(environ.Env.db_url_config(url), default)


def source_open(*, alias: str | None = None, url: str | None = None) -> Source:
    """The source named by a DATABASES alias or by a URL (``sqlite:///path``,
    ``postgres://user@host:port/name``); exactly one of the two."""
    if (alias is None) == (url is None):
        raise SourceError("Name the incumbent's database with a DATABASES alias or a URL (one of the two).")
    if alias is not None:
        return AliasSource(alias)
    assert url is not None  # noqa: S101 - one of the two, checked above
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        # sqlite:////abs/path and sqlite:///relative/path, as django-environ reads them.
        return SqliteSource(Path(unquote(url.split("://", 1)[1][1:]) or "."))
    if scheme in ("postgres", "postgresql", "pgsql"):
        return PostgresSource(url.replace(f"{scheme}://", "postgresql://", 1))
    raise SourceError(
        f"Unsupported database URL scheme {scheme!r}: use sqlite:// or postgres://, or a DATABASES alias."
    )
