"""``pyweft workflows bulk``: a dry run prints a token; the same command with it applies."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from pyweft import Engine, WorkflowContext, workflow
from pyweft.cli.main import app


@workflow(name="cli_bulk_wait")
async def wait_go(ctx: WorkflowContext) -> Any:
    return await ctx.wait_for_signal("go")


def invoke(*args: str) -> Any:
    runner = CliRunner(env={"COLUMNS": "200", "NO_COLOR": "1", "PYWEFT_DATABASE_URL": None})
    return runner.invoke(app, list(args))


def test_dry_run_then_confirm_signals_every_matching_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bulk.db'}"

    async def seed() -> None:
        async with Engine(url, workflows=[wait_go]) as engine:
            for i in range(3):
                await engine.start(wait_go, id=f"ord-{i}")
            await engine.start(wait_go, id="keep-1")

    asyncio.run(seed())
    base = ["workflows", "bulk", "signal", "--db", url, "--id-prefix", "ord-", "--signal", "go"]
    dry = invoke(*base, "--payload", '"now"')
    assert dry.exit_code == 0, dry.output
    assert "3 run(s) match" in dry.output
    token = re.search(r"--confirm (bulk_\S+)", dry.output)
    assert token is not None, dry.output

    unscoped = invoke("workflows", "bulk", "cancel", "--db", url)
    assert unscoped.exit_code == 1 and "BulkScopeError" in unscoped.output
    assert invoke(*base, "--payload", "{oops").exit_code == 2  # refused before opening

    done = invoke(*base, "--payload", '"now"', "--confirm", token.group(1), "--json")
    assert done.exit_code == 0, done.output
    result = json.loads(done.output)["result"]
    assert (result["matched"], result["applied"]) == (3, 3)

    async def results() -> list[Any]:
        async with Engine(url, workflows=[wait_go]) as engine:
            got = [await engine.get_handle(f"ord-{i}").result(timeout=5) for i in range(3)]
            assert (await engine.describe("keep-1")).status == "running"
            await engine.cancel("keep-1")
            return got

    assert asyncio.run(results()) == ["now"] * 3
    again = invoke(*base, "--payload", '"now"', "--confirm", token.group(1))
    assert again.exit_code == 1 and "already spent" in again.output
