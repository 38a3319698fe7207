"""Storage backends for engine tests: the same test runs on memory and on a durable store.

``PYWEFT_TEST_STORAGE`` picks the durable one: ``sqlite`` (default) or
``postgres``. PostgreSQL lives at ``$PYWEFT_TEST_POSTGRES_URL``; each test
gets its own schema there, dropped at teardown.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from pyweft import Engine, MemoryStorage, Storage, VirtualClock

STORAGE_ENV = "PYWEFT_TEST_STORAGE"
POSTGRES_URL_ENV = "PYWEFT_TEST_POSTGRES_URL"
REQUIRE_POSTGRES_ENV = "PYWEFT_REQUIRE_POSTGRES"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DURABLE_BACKENDS = ("sqlite", "postgres")


def durable_backend() -> str:
    """The durable store engine tests run on besides memory: ``sqlite`` or ``postgres``."""
    name = os.environ.get(STORAGE_ENV, "").strip().lower() or "sqlite"
    if name not in DURABLE_BACKENDS:
        raise pytest.UsageError(f"{STORAGE_ENV}={name!r}; use one of {', '.join(DURABLE_BACKENDS)}")
    return name


def postgres_url() -> str:
    return os.environ.get(POSTGRES_URL_ENV, "").strip() or DEFAULT_POSTGRES_URL


def postgres_required() -> bool:
    return os.environ.get(REQUIRE_POSTGRES_ENV, "").strip() not in ("", "0")


@functools.cache
def postgres_unreachable_reason() -> str | None:
    """Why the test server cannot be used, or ``None`` when it answers."""
    url = postgres_url()
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"no PostgreSQL at {redact(url)} ({' '.join(str(exc).split())})"
    return None


def redact(url: str) -> str:
    parts = urlsplit(url)
    if not parts.password:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")))


def require_postgres() -> str:
    """The test server's URL; skips the test when it is unreachable, or fails it in CI.

    ``PYWEFT_REQUIRE_POSTGRES=1`` (set by ``.ci/run``) turns the skip into a failure.
    """
    reason = postgres_unreachable_reason()
    if reason is None:
        return postgres_url()
    hint = f"start one or point {POSTGRES_URL_ENV} at a server"
    if postgres_required():
        pytest.fail(f"{REQUIRE_POSTGRES_ENV} is set but {reason}; {hint}", pytrace=False)
    pytest.skip(f"{reason}; {hint}")


def with_schema(url: str, schema: str) -> str:
    """``url`` with ``?schema=`` set, the form pyweft's storage factory reads."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "schema"] + [("schema", schema)]
    return urlunsplit(parts._replace(query=urlencode(query)))


@contextmanager
def postgres_schema() -> Iterator[tuple[str, str]]:
    """A fresh, unused schema name on the test server, dropped on exit: ``(url, schema)``."""
    url = require_postgres()
    schema = f"pyweft_test_{uuid.uuid4().hex[:16]}"
    try:
        yield url, schema
    finally:
        drop_schema(url, schema)


def drop_schema(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@dataclass
class Backend:
    """Makes engines that share one store, so a test can 'restart' the process."""

    name: str
    path: Path
    clock: VirtualClock = field(default_factory=VirtualClock)
    postgres_url: str | None = None
    """For ``name == "postgres"``: the server URL including this test's ``?schema=``."""
    _memory: MemoryStorage | None = None

    def storage(self) -> str | Storage:
        if self.name == "memory":
            if self._memory is None:
                self._memory = MemoryStorage()
            return self._memory
        if self.name == "postgres":
            assert self.postgres_url is not None, "a postgres Backend needs postgres_url"
            return self.postgres_url
        return f"sqlite:///{self.path / 'engine.db'}"

    def engine(self, **kwargs: Any) -> Engine:
        kwargs.setdefault("clock", self.clock)
        if self.name == "postgres" and "role" not in kwargs:
            # The engine suite checks engine behaviour, the same on every store, and jumps
            # the virtual clock by hours, past any claim TTL; the PostgreSQL default
            # (workflow-lease) has its own tests (test_store_lock, test_workflow_lease).
            kwargs.setdefault("ownership", "none")
        return Engine(self.storage(), **kwargs)
