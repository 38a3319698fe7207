"""SIGKILL right after a parent's terminal commit: its children are still closed.

Issue 10 item 10. The parent's close policy (``await`` or ``request_cancel``:
a child still running is asked to cancel) used to be carried out by writes made
after the parent's terminal commit, so a crash between the two left the child
running to completion. The worker (``parent_close_worker.py``) kills itself the
instant the parent's end is stored; a fresh engine must then cancel the child.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyweft import Engine
from support.backends import postgres_schema, with_schema
from support.poll import eventually

WORKER = Path(__file__).with_name("parent_close_worker.py")


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'pyweft.db'}"
    else:
        with postgres_schema() as (url, schema):
            yield with_schema(url, schema)


@pytest.mark.parametrize("policy", ["request_cancel", "await"])
async def test_a_child_is_cancelled_after_a_sigkill_right_after_its_parent_ended(
    store: str, policy: str
) -> None:
    worker = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(WORKER), store, policy],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert worker.returncode == -signal.SIGKILL, worker.stderr.decode()[-2000:]
    from parent_close_worker import ENGINE_ID, napper, parent  # type: ignore[import-not-found]

    async with Engine(store, workflows=[parent, napper], engine_id=ENGINE_ID) as engine:
        expected = "completed" if policy == "request_cancel" else "cancelled"
        assert (await engine.describe("p")).status == expected
        await eventually(
            lambda: _status_is(engine, "kid", "cancelled"), timeout=10, what="child cancelled"
        )


async def _status_is(engine: Engine, workflow_id: str, status: str) -> bool:
    return (await engine.describe(workflow_id)).status == status
