from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.backends import Backend, durable_backend, postgres_schema, with_schema


@pytest.fixture(params=["memory", durable_backend()])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Memory plus the durable store ``PYWEFT_TEST_STORAGE`` names (SQLite by default).

    On PostgreSQL each test gets a fresh schema, dropped at teardown.
    """
    if request.param == "postgres":
        with postgres_schema() as (url, schema):
            yield Backend(name="postgres", path=tmp_path, postgres_url=with_schema(url, schema))
    else:
        yield Backend(name=request.param, path=tmp_path)
