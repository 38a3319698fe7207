"""Blocked runs from the CLI, as an operator meets them after a bad deploy.

An engine in this process drives the runs on a SQLite file; ``pyweft`` runs as
a separate process (a client: it drives nothing) to check versions, list the
blocked runs, resume one and fail another.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from pyweft import Engine, VirtualClock, WorkflowContext, activity, workflow
from support.poll import eventually

APP = """
from pyweft import WorkflowContext, workflow


@workflow(name="billing", version="1")
async def billing(ctx: WorkflowContext) -> str:
    return "never run by the CLI"
"""


@activity
async def charge() -> str:
    return "charged"


@activity
async def refund() -> str:
    return "refunded"


def billing(step_one: object) -> object:
    @workflow(name="billing", version="1")
    async def flow(ctx: WorkflowContext) -> str:
        done = await ctx.run(step_one)  # type: ignore[arg-type]
        await ctx.wait_for_signal("ship")
        return str(done)

    return flow


async def pyweft(db: Path, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYWEFT_DATABASE_URL", "FORCE_COLOR")}
    env.update(COLUMNS="200", NO_COLOR="1", PYWEFT_DATABASE_URL=f"sqlite:///{db}")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(db.parent), env.get("PYTHONPATH")]))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pyweft.cli.main",
        *args,
        env=env,
        cwd=db.parent,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def engine(db: Path, step_one: object) -> Engine:
    return Engine(f"sqlite:///{db}", workflows=[billing(step_one)], clock=VirtualClock())


async def test_an_operator_lists_resumes_and_fails_blocked_runs_from_the_cli(
    tmp_path: Path,
) -> None:
    db = tmp_path / "app.db"
    (tmp_path / "drift_app.py").write_text(APP)
    async with engine(db, charge) as good:
        for workflow_id in ("b1", "b2"):
            await good.start("billing", id=workflow_id)

        async def both_waiting() -> bool:
            return all([(await good.history(i)).steps for i in ("b1", "b2")])

        await eventually(both_waiting, what="step 1 recorded in both")
    async with engine(db, refund) as bad:  # the bad deploy: step 1 changed

        async def both_blocked() -> bool:
            return len((await bad.list(status="blocked")).items) == 2

        await eventually(both_blocked, what="both blocked")

    code, out, err = await pyweft(db, "workflows", "list", "--status", "blocked", "--json")
    assert code == 0, err
    listed = json.loads(out)
    rows: list[dict[str, Any]] = listed["items"] if isinstance(listed, dict) else listed
    assert sorted(r["id"] for r in rows) == ["b1", "b2"]
    assert all(r["status"] == "blocked" for r in rows)

    code, out, err = await pyweft(db, "workflows", "show", "b1")
    assert code == 0, err
    assert "code drift at step 1 (step_mismatch)" in out  # the diff, side by side
    assert "journal recorded" in out and "code now asks for" in out
    assert "charge" in out and "refund" in out
    code, out, err = await pyweft(db, "workflows", "show", "b1", "--json")
    drift = json.loads(out)["drift"]
    assert drift["step"] == 1 and drift["recorded"]["name"] == "charge"
    assert drift["requested"] == {
        "kind": "activity",
        "name": "refund",
        "args": "()",
        "detail": None,
    }

    code, out, err = await pyweft(db, "versions", "check", "--app", "drift_app")
    assert code == 0, out + err  # the versions match: the drift is in the code
    assert "blocked: 2 wait for code that replays them" in out
    assert "workflows list --status blocked" in out

    code, out, err = await pyweft(db, "workflows", "fail", "b2", "--reason", "refunded by hand")
    assert code == 0, out + err
    assert "b2 is now failed" in out
    code, _, err = await pyweft(db, "workflows", "fail", "b2", "--reason", "again")
    assert code == 1 and "WorkflowTerminalError" in err

    code, out, err = await pyweft(db, "workflows", "resume", "b1")
    assert code == 0, out + err
    assert "b1 is now running" in out

    async with engine(db, charge) as fixed:  # the fix is deployed
        await eventually(lambda: fixed.is_running_here("b1"), what="b1 picked up")
        await fixed.signal("b1", "ship")
        assert await fixed.result("b1", timeout=10) == "charged"
        info = await fixed.describe("b2")
    assert info.status == "failed" and info.error is not None
    assert (info.error.type, info.error.message) == ("FailedByOperator", "refunded by hand")
