"""pytest plugin (registered as the ``pyweft`` entry point, loaded automatically).

Fixtures (async ones need ``pytest-asyncio``):

``pyweft_env``
    An open :class:`~pyweft.testing.TestEnv` (memory store, virtual clock). Options
    come from the ``pyweft`` marker: ``@pytest.mark.pyweft(workflows=[...],
    activities=[...], auto_advance=True, storage="sqlite", ...)``.
``pyweft_engine``
    The engine of ``pyweft_env``.
``pyweft_faulty_storage``
    A :class:`~pyweft.testing.FaultyStorage` over a fresh memory store, for tests of
    code that must survive a misbehaving store (pass it to ``Engine``, or as
    ``@pytest.mark.pyweft(storage=...)``'s value via your own fixture).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from pyweft.engine.engine import Engine
from pyweft.storage.memory import MemoryStorage
from pyweft.testing.env import TestEnv
from pyweft.testing.faults import FaultyStorage

MARKER = "pyweft"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(workflows=(), activities=(), **options): options of the pyweft_env fixture "
        "(pyweft.testing.TestEnv arguments)",
    )


def _options(request: pytest.FixtureRequest) -> dict[str, Any]:
    marker = request.node.get_closest_marker(MARKER)
    if marker is None:
        return {}
    if marker.args:
        raise pytest.UsageError(
            f"@pytest.mark.{MARKER} takes keyword arguments only (workflows=[...], ...)"
        )
    return dict(marker.kwargs)


try:
    import pytest_asyncio
except ImportError:  # pragma: no cover - the async fixtures need pytest-asyncio
    pass
else:

    @pytest_asyncio.fixture
    async def pyweft_env(request: pytest.FixtureRequest) -> AsyncIterator[TestEnv]:
        """An open TestEnv configured by the ``pyweft`` marker; closed after the test."""
        async with TestEnv(**_options(request)) as env:
            yield env

    @pytest_asyncio.fixture
    async def pyweft_engine(pyweft_env: TestEnv) -> Engine:
        """The engine of ``pyweft_env``."""
        return pyweft_env.engine


@pytest.fixture
def pyweft_faulty_storage() -> Iterator[FaultyStorage]:
    """A fault-injecting store over a fresh memory store."""
    yield FaultyStorage(MemoryStorage())
