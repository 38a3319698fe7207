"""The CLI shows why runs failed: ``--category`` on list and count, ``--by
failure_category``, and the category in ``show`` and in JSON output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pyweft import (
    Engine,
    RetryPolicy,
    VirtualClock,
    WorkflowCancelledError,
    WorkflowContext,
    WorkflowFailedError,
    activity,
    workflow,
)

PYWEFT = [sys.executable, "-m", "pyweft.cli.main"]


@activity(retry=RetryPolicy(max_attempts=1))
async def refuse() -> None:
    raise ValueError("card declined")


@workflow
async def charge(ctx: WorkflowContext) -> None:
    await ctx.run(refuse)


@workflow
async def nap(ctx: WorkflowContext) -> None:
    await ctx.sleep(3600)


def pyweft(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYWEFT_DATABASE_URL", "FORCE_COLOR")}
    env.update(COLUMNS="200", NO_COLOR="1", PYWEFT_DATABASE_URL=f"sqlite:///{db}")
    return subprocess.run(
        [*PYWEFT, *args], env=env, cwd=db.parent, capture_output=True, text=True, timeout=30
    )


async def test_cli_filters_counts_and_shows_failure_categories(tmp_path: Path) -> None:
    db = tmp_path / "cats.db"
    clock = VirtualClock()
    async with Engine(f"sqlite:///{db}", workflows=[charge, nap], clock=clock) as engine:
        for workflow_id in ("c1", "c2"):
            with pytest.raises(WorkflowFailedError):
                await (await engine.start(charge, id=workflow_id)).result(timeout=5)
        await engine.start(nap, id="n1")
        await engine.cancel("n1")
        with pytest.raises(WorkflowCancelledError):
            await engine.get_handle("n1").result(timeout=5)

    commands = [
        ("workflows", "list", "--category", "application", "--json"),
        ("workflows", "count", "--by", "failure_category", "--json"),
        ("workflows", "show", "n1"),
        ("workflows", "list"),
        ("workflows", "list", "--category", "oops"),
    ]
    with ThreadPoolExecutor(max_workers=len(commands)) as pool:  # each mostly starts up
        listed, counted, shown, table, bad = pool.map(lambda c: pyweft(db, *c), commands)

    assert listed.returncode == 0, listed.stderr
    items = json.loads(listed.stdout)["items"]
    assert sorted(i["id"] for i in items) == ["c1", "c2"]
    assert {i["failure_category"] for i in items} == {"application"}

    assert counted.returncode == 0, counted.stderr
    groups = {g["key"]: g["count"] for g in json.loads(counted.stdout)["groups"]}
    assert groups == {"application": 2, "cancellation": 1}

    assert shown.returncode == 0, shown.stderr
    assert any(line.split() == ["category", "cancellation"] for line in shown.stdout.splitlines())

    assert "category" in table.stdout.splitlines()[0]

    assert bad.returncode != 0
    assert "unknown failure_category 'oops'" in bad.stderr
