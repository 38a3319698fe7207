"""``pyweft queues list|show``, driven as a user would, against a store with queued runs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from pyweft import Engine, Queue, WorkflowContext, workflow

PYWEFT = [sys.executable, "-m", "pyweft.cli.main"]


@workflow
async def parked(ctx: WorkflowContext) -> None:
    await ctx.wait_for_signal("go")


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYWEFT_")}
    env.update(COLUMNS="200", NO_COLOR="1")
    return subprocess.run(
        [*PYWEFT, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


async def _fill(db: str) -> None:
    imports = Queue("imports", concurrency=1, worker_concurrency=1, rate_limit=(50, "30s"))
    async with Engine(db, workflows=[parked], queues=[imports, Queue("idle")]) as engine:
        for i in range(3):
            await engine.enqueue(imports, parked, id=f"r{i}")
        for _ in range(500):
            if (await engine.queue_info("imports")).in_flight == 1:
                break
            await asyncio.sleep(0.01)


def test_queues_list_and_show_report_depth_in_flight_and_limits(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'app.db'}"
    asyncio.run(_fill(db))

    listed = cli("queues", "list", "--db", db, "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    items = {q["name"]: q for q in json.loads(listed.stdout)["items"]}
    assert set(items) == {"idle", "imports"}
    imports = items["imports"]
    assert (imports["depth"], imports["in_flight"], imports["concurrency"]) == (2, 1, 1)
    assert imports["rate_limit"] == [50, 30.0] and imports["recent_starts"] == 1
    assert imports["oldest_wait_s"] is not None and imports["oldest_wait_s"] >= 0

    table = cli("queues", "list", "--db", db, cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert "imports" in table.stdout and "1/50 per 30s" in table.stdout

    shown = json.loads(cli("queues", "show", "imports", "--db", db, "--json", cwd=tmp_path).stdout)
    assert shown["oldest_wait_s"] >= imports["oldest_wait_s"]  # real time went on
    assert {**shown, "oldest_wait_s": 0} == {**imports, "oldest_wait_s": 0}

    missing = cli("queues", "show", "nope", "--db", db, cwd=tmp_path)
    assert missing.returncode == 1
    assert "QueueNotFoundError" in missing.stderr
