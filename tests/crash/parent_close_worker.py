"""A worker that dies by SIGKILL right after a parent run's terminal commit lands.

Usage: ``python parent_close_worker.py STORE_URL POLICY``. It starts run ``p``,
which starts child ``kid`` (sleeping an hour) with ``parent_close_policy=POLICY``
and then ends: ``request_cancel`` returns at once; ``await`` is cancelled by the
worker once the child sleeps. The store wrapper kills the process the moment
the write that ends ``p`` has been applied, before anything else can run: the
window in which a parent's children used to be left running for good.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyweft import Engine, WorkflowContext, WorkflowNotFoundError, workflow
from pyweft.engine.replay import keys, records
from pyweft.storage.base import Expect, Op, Put, Storage
from pyweft.storage.factory import open_storage

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.poll import eventually

PARENT_KEY = keys.wf("p")
# The test reopens the store as the same engine, which takes the dead one's claims back
# at once (under ownership="workflow-lease", the PostgreSQL default).
ENGINE_ID = "parent-close-worker"


@workflow(name="napper")
async def napper(ctx: WorkflowContext) -> str:
    await ctx.sleep("1h")
    return "rested"


@workflow(name="parent")
async def parent(ctx: WorkflowContext, policy: str) -> str:
    return str(await ctx.start_child(napper, id="kid", parent_close_policy=policy))


class DieAfterParentEnds:
    """Passes everything to ``inner``; SIGKILLs this process once ``p`` is stored finished."""

    def __init__(self, inner: Storage) -> None:
        self._inner = inner
        self.capabilities = inner.capabilities

    async def get(self, key: str) -> bytes | None:
        return await self._inner.get(key)

    async def scan(self, prefix: str, **options: Any) -> list[tuple[str, bytes]]:
        return await self._inner.scan(prefix, **options)

    async def batch(self, ops: Sequence[Op]) -> None:
        await self._inner.batch(ops)
        self._die_if_parent_ended(ops)

    async def conditional_batch(self, conditions: Sequence[Expect], ops: Sequence[Op]) -> bool:
        ok = await self._inner.conditional_batch(conditions, ops)
        if ok:
            self._die_if_parent_ended(ops)
        return ok

    async def close(self) -> None:
        await self._inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _die_if_parent_ended(self, ops: Sequence[Op]) -> None:
        for op in ops:
            if (
                isinstance(op, Put)
                and op.key == PARENT_KEY
                and records.decode_state(op.value).status in records.TERMINAL_STATUSES
            ):
                os.kill(os.getpid(), signal.SIGKILL)


async def main(url: str, policy: str) -> None:
    store = DieAfterParentEnds(open_storage(url))
    async with Engine(
        store,  # type: ignore[arg-type]
        workflows=[parent, napper],
        engine_id=ENGINE_ID,
    ) as engine:
        handle = await engine.start(parent, policy, id="p")
        if policy == "await":
            await eventually(lambda: _child_asleep(engine), timeout=30, what="child asleep")
            await handle.cancel()
        await handle.result(timeout=30)
    raise SystemExit("the parent ended but the worker was not killed")


async def _child_asleep(engine: Engine) -> bool:
    try:
        return bool((await engine.history("kid")).steps)  # its sleep is open
    except WorkflowNotFoundError:
        return False


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
