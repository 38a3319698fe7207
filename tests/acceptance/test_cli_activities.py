"""``pyweft activities list|complete|fail|heartbeat`` from another process, on SQLite."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyweft import (
    ActivityError,
    Engine,
    RetryPolicy,
    WorkflowContext,
    activity,
    activity_context,
    workflow,
)
from support.poll import eventually

PYWEFT = [sys.executable, "-m", "pyweft.cli.main"]


@activity(retry=RetryPolicy(max_attempts=1))
async def wait_for_ops(ticket: str) -> Any:
    return activity_context().complete_async()


@workflow
async def ticketing(ctx: WorkflowContext, ticket: str) -> Any:
    try:
        return await ctx.run(wait_for_ops, ticket)
    except ActivityError as err:
        return f"{err.error_type}: {err.error_message}"


@dataclass(frozen=True, slots=True)
class Done:
    code: int
    stdout: str
    stderr: str


async def pyweft(db: Path, *args: str) -> Done:
    env = {k: v for k, v in os.environ.items() if k not in ("PYWEFT_DATABASE_URL", "FORCE_COLOR")}
    env.update(COLUMNS="200", NO_COLOR="1", PYWEFT_DATABASE_URL=f"sqlite:///{db}")
    proc = await asyncio.create_subprocess_exec(
        *PYWEFT,
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return Done(proc.returncode, out.decode(), err.decode())


async def tokens(db: Path, workflow_id: str) -> list[str]:
    done = await pyweft(db, "activities", "list", "--workflow", workflow_id, "--json")
    assert done.code == 0, done
    return [item["token"] for item in json.loads(done.stdout)["items"]]


async def test_the_cli_lists_completes_and_fails_waiting_activities(tmp_path: Path) -> None:
    db = tmp_path / "pyweft.db"
    async with Engine(f"sqlite:///{db}", workflows=[ticketing], poll_interval=0.05) as engine:
        first = await engine.start(ticketing, "T-1", id="ticket-1")
        second = await engine.start(ticketing, "T-2", id="ticket-2")
        for wid in ("ticket-1", "ticket-2"):
            await eventually(
                lambda wid=wid: _parked(engine, wid),  # type: ignore[misc]
                what=f"{wid} parked",
            )
        listed = await pyweft(db, "activities", "list")
        assert listed.code == 0 and "ticket-1 step 1 (wait_for_ops, attempt 1)" in listed.stdout

        (token,) = await tokens(db, "ticket-1")
        done = await pyweft(db, "activities", "complete", token, "--result", '{"fixed": true}')
        assert done.code == 0, done
        assert await first.result(timeout=10) == {"fixed": True}
        again = await pyweft(db, "activities", "complete", token, "--result", "1")
        assert again.code == 1 and again.stderr.startswith("error: ActivityTokenNotFoundError")

        (token2,) = await tokens(db, "ticket-2")
        bad = await pyweft(db, "activities", "complete", token2, "--result", "{nope")
        assert bad.code == 2 and "not valid JSON" in bad.stderr
        beat = await pyweft(db, "activities", "heartbeat", token2, "--details", '{"pct": 10}')
        assert beat.code == 0, beat
        failed = await pyweft(
            db, "activities", "fail", token2, "--message", "won't fix", "--type", "WontFix",
            "--non-retryable",
        )  # fmt: skip
        assert failed.code == 0, failed
        assert await second.result(timeout=10) == "WontFix: won't fix"


async def _parked(engine: Engine, workflow_id: str) -> bool:
    return len(await engine.pending_activities(workflow_id)) == 1
