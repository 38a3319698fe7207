"""One engine in its own process, for the activity crash tests (heartbeats and friends).

Usage: ``python activity_worker.py CONFIG_JSON`` with keys ``url``, ``ledger``,
``lifetime``, ``mode``, ``start`` (run ids to start), ``wait_for`` (run ids to wait
for before exiting) and ``stall`` (true: activities never finish in this process,
so the test can kill it mid-attempt).

Each ledger line is ``KIND LIFETIME TIME RUN/LABEL ATTEMPT JSON`` written with one
``os.write`` on an ``O_APPEND`` descriptor (a line is whole or absent after SIGKILL):

``READY``  the engine is open;  ``START``  an attempt began (JSON: its
``last_heartbeat_details``);  ``BEAT``  it heartbeated (JSON: the details);
``ASK``  the async activity ran and parks (JSON: its token);  ``AFTER``  the
step after it ran (JSON: the answer);  ``DONE``  a run this process waited for
completed (JSON: its result).

``CHARGE``  a keyed activity was dispatched (WHAT: the order);  ``VERIFY``  its
verify was asked (WHAT: the key; JSON: the configured answer).

``mode`` ``"keyed"`` runs ``keyed`` (a keyed activity; run ids starting ``v-`` use
one with a ``verify`` answering the config's ``verify``, others one without).
``mode`` ``"async"`` runs ``approving`` (an activity completed by token, then one
more step) instead of ``counting``; ``ownership`` sets the engine's mode (with a
2 s claim TTL, so a successor takes over a killed worker's runs quickly).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
import time
from typing import Any

from pyweft import (
    ActivityError,
    Engine,
    RetryPolicy,
    VerifyResult,
    WorkflowContext,
    activity,
    activity_context,
    workflow,
)

CFG: dict[str, Any] = {}
_ledger: int | None = None


def note(kind: str, what: str = "-", attempt: int = 0, data: Any = None) -> None:
    assert _ledger is not None
    text = json.dumps(data, separators=(",", ":"))
    line = f"{kind} {CFG['lifetime']} {time.time():.6f} {what} {attempt} {text}\n"
    os.write(_ledger, line.encode())


@activity(heartbeat_throttle="0.05s", retry=RetryPolicy(max_attempts=5, initial_interval=0.1))
def count(label: str) -> dict[str, Any]:
    """Counts to 40 (forever when stalled), heartbeating ``{"label", "n"}`` each step."""
    ctx = activity_context()
    last = ctx.last_heartbeat_details
    what = f"{ctx.workflow_id}/{label}"
    note("START", what, ctx.attempt, last)
    n = last["n"] if last else 0
    while CFG.get("stall") or n < 40:
        n += 1
        ctx.heartbeat({"label": label, "n": n})
        note("BEAT", what, ctx.attempt, {"label": label, "n": n})
        threading.Event().wait(0.004)
    return {"label": label, "resumed_from": last, "attempt": ctx.attempt}


@workflow(name="counting")
async def counting(ctx: WorkflowContext) -> list[Any]:
    return list(await ctx.all(ctx.run(count, "left"), ctx.run(count, "right")))


@activity(retry=RetryPolicy(max_attempts=1))
async def ask(question: str) -> Any:
    ctx = activity_context()
    note("ASK", ctx.workflow_id, ctx.attempt, ctx.async_token)
    return ctx.complete_async()


@activity
async def after(answer: Any) -> Any:
    note("AFTER", activity_context().workflow_id, 0, answer)
    return answer


@workflow(name="approving")
async def approving(ctx: WorkflowContext) -> Any:
    answer = await ctx.run(ask, "ship it?")
    return await ctx.run(after, answer)


def check_charge(key: str, order: str) -> VerifyResult:
    """The verify of ``charge``: answers what the config's ``verify`` says."""
    note("VERIFY", key, 0, CFG.get("verify"))
    answer = CFG.get("verify")
    if answer == "not_completed":
        return VerifyResult.not_completed()
    if answer == "completed":
        return VerifyResult.completed(f"verified-{order}")
    if answer == "unavailable":
        return VerifyResult.completed_result_unavailable("no receipt kept")
    return VerifyResult.indeterminate("cannot tell")


@activity(idempotency_key=lambda order: f"charge/{order}", verify=check_charge)
def charge(order: str) -> str:
    note("CHARGE", order, activity_context().attempt)
    while CFG.get("stall"):
        threading.Event().wait(0.01)  # dispatched, never reports back: SIGKILL lands here
    return f"charged-{order}"


@activity(idempotency_key=lambda order: f"ship/{order}")
def ship(order: str) -> str:
    note("CHARGE", order, activity_context().attempt)
    while CFG.get("stall"):
        threading.Event().wait(0.01)
    return f"shipped-{order}"


@workflow(name="keyed")
async def keyed(ctx: WorkflowContext, order: str, verified: bool) -> Any:
    try:
        return await ctx.run(charge if verified else ship, order)
    except ActivityError as err:
        return {"error_type": err.error_type, "message": err.error_message}


async def main() -> int:
    global _ledger
    _ledger = os.open(CFG["ledger"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    options: dict[str, Any] = {
        "workflows": [counting, approving, keyed],
        "poll_interval": 0.05,
    }
    if CFG.get("ownership"):
        options.update(ownership=CFG["ownership"], claim_ttl=2.0, claim_renew_interval=0.5)
    engine = Engine(CFG["url"], **options)
    await engine.open()
    note("READY")
    try:
        for run_id in CFG.get("start", []):
            if CFG.get("mode") == "keyed":
                verified = run_id.startswith("v-")
                await engine.start(keyed, run_id, verified, id=run_id, on_conflict="use_existing")
            else:
                wf = approving if CFG.get("mode") == "async" else counting
                await engine.start(wf, id=run_id, on_conflict="use_existing")
        for run_id in CFG.get("wait_for", []):
            result = await engine.get_handle(run_id).result()
            note("DONE", run_id, 0, result)
        if CFG.get("stall"):
            await asyncio.Event().wait()  # until SIGKILLed
    finally:
        await engine.shutdown()
    return 0


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.INFO, format="%(created).6f %(levelname)s %(name)s %(message)s"
    )
    CFG.update(json.loads(sys.argv[1]))
    sys.exit(asyncio.run(main()))
