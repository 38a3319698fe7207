"""Turn a storage URL, or nothing at all, into an open adapter.

URLs are the one spelling users type (CLI flags, environment, config), so
every rejection names the URL and lists the forms that do work.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from pyweft.errors import ConfigurationError
from pyweft.storage.base import Storage
from pyweft.storage.memory import MemoryStorage
from pyweft.storage.sqlite import SQLiteStorage

if TYPE_CHECKING:
    from pyweft.storage.postgres import PostgresStorage

ENV_VAR = "PYWEFT_DATABASE_URL"
DEFAULT_URL = "sqlite:///pyweft.db"
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
SUPPORTED_FORMS = (
    "sqlite:///relative/path.db, sqlite:////absolute/path.db (optionally with "
    "?synchronous=FULL or ?synchronous=NORMAL, and ?allow_foreign_tables=1), a plain path "
    "ending in "
    f"{'/'.join(SQLITE_SUFFIXES)}, postgresql://user@host:5432/dbname (optionally with "
    "?schema=name), or memory://"
)


def default_storage_url() -> str:
    """``$PYWEFT_DATABASE_URL`` when set and non-empty, else ``./pyweft.db`` as a URL."""
    return os.environ.get(ENV_VAR, "").strip() or DEFAULT_URL


def open_storage(
    url: str | None = None,
    *,
    sqlite_synchronous: str = "FULL",
    sqlite_create: bool = True,
    read_only: bool = False,
) -> Storage:
    """Open the adapter ``url`` names (default: :func:`default_storage_url`).

    ``sqlite_synchronous`` applies to SQLite unless the URL's own
    ``?synchronous=`` says otherwise; the more specific setting wins.
    ``sqlite_create=False`` refuses a missing SQLite file instead of creating it;
    ``read_only=True`` opens SQLite read-only (never creates or changes the file).
    Raises :class:`~pyweft.errors.ConfigurationError` for anything unusable.
    """
    text = default_storage_url() if url is None else url.strip()
    scheme, sep, rest = text.partition("://")
    sqlite_opts = {"create": sqlite_create, "read_only": read_only}
    if not sep:
        if text.lower().endswith(SQLITE_SUFFIXES):
            return SQLiteStorage(
                os.path.expanduser(text), synchronous=sqlite_synchronous, **sqlite_opts
            )
        raise _unsupported(text)
    scheme = scheme.lower()
    if scheme == "memory":
        if rest:
            raise ConfigurationError(
                f"storage URL {_redact(text)!r}: memory:// takes no path or options"
            )
        return MemoryStorage()
    if scheme in ("postgresql", "postgres"):
        return _open_postgres(text)
    if scheme.startswith(("postgresql+", "postgres+")):
        raise ConfigurationError(
            f"storage URL {_redact(text)!r}: pyweft talks to PostgreSQL through psycopg itself; "
            f"drop the driver suffix: {_redact(scheme.partition('+')[0] + '://' + rest)!r}"
        )
    if scheme == "sqlite":
        return _open_sqlite(text, rest, sqlite_synchronous, sqlite_opts)
    raise _unsupported(text)


def _open_sqlite(url: str, rest: str, synchronous: str, opts: dict[str, bool]) -> SQLiteStorage:
    location, _, query = rest.partition("?")
    if location.strip("/") == ":memory:":
        raise ConfigurationError(
            f"storage URL {url!r}: in-memory SQLite is not supported; use memory:// instead"
        )
    if not location.strip("/"):
        raise ConfigurationError(
            f"storage URL {url!r} names no database file; "
            "use sqlite:///relative/path.db or sqlite:////absolute/path.db"
        )
    if not location.startswith("/"):
        raise ConfigurationError(
            f"storage URL {url!r} names a host ({location.split('/')[0]!r}); SQLite URLs have "
            "none: use sqlite:///relative/path.db or sqlite:////absolute/path.db"
        )
    path = unquote(location[1:])
    if not path or path.endswith("/"):
        raise ConfigurationError(
            f"storage URL {url!r} names no database file; "
            "use sqlite:///relative/path.db or sqlite:////absolute/path.db"
        )
    allow_foreign = False
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name == "synchronous":
            synchronous = value
        elif name == "allow_foreign_tables":
            if value.lower() not in ("1", "true", "yes", "0", "false", "no"):
                raise ConfigurationError(
                    f"storage URL {url!r}: allow_foreign_tables takes 1 or 0, got {value!r}"
                )
            allow_foreign = value.lower() in ("1", "true", "yes")
        else:
            raise ConfigurationError(
                f"storage URL {url!r}: unknown SQLite option {name!r}; the options are "
                "synchronous=FULL|NORMAL and allow_foreign_tables=1"
            )
    return SQLiteStorage(
        os.path.expanduser(path),
        synchronous=synchronous,
        allow_foreign_tables=allow_foreign,
        **opts,
    )


def _open_postgres(url: str) -> PostgresStorage:
    """``schema=`` is ours; every other query parameter goes to libpq untouched."""
    parts = urlsplit(url)
    schema = "public"
    kept: list[str] = []
    for item in parts.query.split("&") if parts.query else []:
        name, _, value = item.partition("=")
        if unquote(name) == "schema":
            schema = unquote(value)
        else:
            kept.append(item)
    conninfo = urlunsplit(parts._replace(query="&".join(kept)))
    try:
        from pyweft.storage.postgres import PostgresStorage  # psycopg loads only when used
    except ImportError as exc:  # the driver is an extra: `pip install "pyweft[postgres]"`
        raise ConfigurationError(
            f"storage URL {_redact(url)!r} needs the PostgreSQL driver, which is not installed "
            f"({exc}); install it with: pip install 'pyweft[postgres]'"
        ) from exc

    try:
        return PostgresStorage(conninfo, schema=schema)
    except ConfigurationError as exc:
        raise ConfigurationError(f"storage URL {_redact(url)!r}: {exc}") from None


def _unsupported(url: str) -> ConfigurationError:
    return ConfigurationError(
        f"unsupported storage URL {_redact(url)!r}; use one of: {SUPPORTED_FORMS}"
    )


def _redact(url: str) -> str:
    """Hide a password so that error messages and logs never carry it."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if not password:
        return url
    netloc = parts.netloc.replace(f":{password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))
