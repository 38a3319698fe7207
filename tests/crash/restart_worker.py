"""One engine in its own process, for the store-lock and fast-restart tests.

Usage: ``python restart_worker.py CONFIG_JSON`` with keys ``url``, ``ledger``,
``ownership`` (or null for the default), ``engine_id`` (or null), ``start`` (run
ids to start), ``sleep_s``, ``lease_ttl``, ``claim_ttl``, ``claim_renew_interval``,
``poll_interval`` and ``wait_for`` (run ids to wait for before exiting).

Every line it appends to the ledger is ``KIND PID TIME TEXT`` (one ``os.write``
on an ``O_APPEND`` descriptor, so lines of several processes never interleave):

``OPENING``  about to open the engine;  ``OPEN``  open (TEXT = engine id)
``REFUSED``  ``open()`` raised StoreInUseError (TEXT = its holder); exits 3
``EXEC``     an activity ran (TEXT = run id/label)
``ASLEEP``   the workflow reached its sleep (written again on replay)
``DONE``     a run this process waited for completed (TEXT = run id)
``BYE``      every awaited run completed and the engine shut down; exits 0
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from typing import Any

from pyweft import Engine, StoreInUseError, WorkflowContext, activity, workflow

_ledger: int | None = None


def note(kind: str, text: str = "-") -> None:
    assert _ledger is not None
    line = f"{kind} {os.getpid()} {time.time():.6f} {text.replace(' ', '_')}\n"
    os.write(_ledger, line.encode())


@activity(name="mark")
async def mark(label: str) -> str:
    note("EXEC", label)
    return label


@workflow(name="nap")
async def nap(ctx: WorkflowContext, sleep_s: float) -> str:
    await ctx.run(mark, f"{ctx.workflow_id}/before")
    note("ASLEEP", ctx.workflow_id)
    await ctx.sleep(sleep_s)
    await ctx.run(mark, f"{ctx.workflow_id}/after")
    return "rested"


async def main(cfg: dict[str, Any]) -> int:
    global _ledger
    _ledger = os.open(cfg["ledger"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    options: dict[str, Any] = {
        "workflows": [nap],
        "poll_interval": cfg.get("poll_interval", 0.1),
        "lease_ttl": cfg.get("lease_ttl", 30.0),
        "lease_wait_timeout": cfg.get("lease_wait_timeout", 120.0),
        "claim_ttl": cfg.get("claim_ttl", 30.0),
        "claim_renew_interval": cfg.get("claim_renew_interval", 5.0),
    }
    if cfg.get("ownership") is not None:
        options["ownership"] = cfg["ownership"]
    if cfg.get("engine_id") is not None:
        options["engine_id"] = cfg["engine_id"]
    engine = Engine(cfg["url"], **options)
    note("OPENING")
    try:
        await engine.open()
    except StoreInUseError as exc:
        note("REFUSED", exc.holder or "-")
        return 3
    try:
        note("OPEN", engine.engine_id)
        for run_id in cfg.get("start", []):
            await engine.start(nap, cfg["sleep_s"], id=run_id, on_conflict="use_existing")
        for run_id in cfg.get("wait_for", []):
            await engine.get_handle(run_id).result()
            note("DONE", run_id)
    finally:
        await engine.shutdown()
    note("BYE")
    return 0


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.INFO, format="%(created).6f %(levelname)s %(name)s %(message)s"
    )
    sys.exit(asyncio.run(main(json.loads(sys.argv[1]))))
