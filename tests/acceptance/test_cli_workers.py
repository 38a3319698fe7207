"""``pyweft workers list|drain|resume|queues`` from another process, on SQLite."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from pyweft import Engine, Worker, WorkflowContext, activity, workflow

PYWEFT = [sys.executable, "-m", "pyweft.cli.main"]


@activity(queue="media")
async def thumb(x: int) -> int:
    return x


async def pyweft(db: Path, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYWEFT_DATABASE_URL", "FORCE_COLOR")}
    env.update(COLUMNS="200", NO_COLOR="1", PYWEFT_DATABASE_URL=f"sqlite:///{db}")
    proc = await asyncio.create_subprocess_exec(
        *PYWEFT, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_workers_are_listed_drained_and_resumed_from_the_cli(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    async with Worker(
        f"sqlite:///{db}", activities=[thumb], queues=["media"], worker_id="w-1"
    ) as w:
        code, out, _ = await pyweft(db, "workers", "list", "--json")
        assert code == 0
        [item] = json.loads(out)["items"]
        assert (item["id"], item["status"], item["queues"]) == ("w-1", "active", ["media"])
        assert item["activities"] == ["thumb"] and item["concurrency"] == 8

        code, out, _ = await pyweft(db, "workers", "drain", "w-1", "--json")
        assert code == 0 and json.loads(out) == {"id": "w-1", "requested": "drain"}
        await w.heartbeat()
        assert w.draining
        code, out, _ = await pyweft(db, "workers", "list")
        assert code == 0 and "w-1 drained" in out and "media" in out

        code, out, _ = await pyweft(db, "workers", "resume", "w-1")
        assert code == 0 and "resume requested for worker w-1" in out
        await w.heartbeat()
        assert not w.draining

        code, _, err = await pyweft(db, "workers", "drain", "nobody")
        assert code == 1 and "no worker 'nobody'" in err


@workflow
async def thumbs(ctx: WorkflowContext, n: int) -> list[int]:
    return list(await ctx.all(*[ctx.run(thumb, i) for i in range(n)]))


async def test_activity_queues_are_shown_from_the_cli(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    async with Engine(f"sqlite:///{db}", workflows=[thumbs], serve_queues=[]) as engine:
        await engine.set_activity_queue_limits("media", concurrency=4, rate_limit=(50, "30s"))
        handle = await engine.start(thumbs, 3)
        code, out, _ = await pyweft(db, "workers", "queues", "--json")
        assert code == 0
        [media] = json.loads(out)["items"]
        assert (media["name"], media["waiting"], media["in_flight"]) == ("media", 3, 0)
        assert media["concurrency_limit"] == 4
        assert media["rate_limit"] == {"count": 50, "window_s": 30.0}
        code, out, _ = await pyweft(db, "workers", "queues", "media")
        assert code == 0 and "waiting    3" in out and "at most 4 at once, 50 per 30s" in out
        code, _, err = await pyweft(db, "workers", "queues", "bad name")
        assert code == 1 and "queue" in err
        async with Worker(f"sqlite:///{db}", activities=[thumb], queues=["media"]):
            assert await handle.result(timeout=10) == [0, 1, 2]


MEDIA_TASKS = """
from pyweft import activity


@activity(queue="media")
async def thumb(x: int) -> int:
    return x * 10
"""


async def test_a_cli_worker_started_before_any_engine_creates_the_store_and_serves_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "media_tasks.py").write_text(MEDIA_TASKS)
    db = tmp_path / "app.db"
    env = {k: v for k, v in os.environ.items() if k not in ("PYWEFT_DATABASE_URL", "FORCE_COLOR")}
    env.update(COLUMNS="200", NO_COLOR="1")
    proc = await asyncio.create_subprocess_exec(
        *PYWEFT, "worker", "media_tasks", "--db", f"sqlite:///{db}", "--queue", "media",
        cwd=tmp_path, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        first = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        assert f"created a new, empty store at {db}" in first, first
        second = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        assert "serves media" in second, second
        async with Engine(f"sqlite:///{db}", workflows=[thumbs], serve_queues=[]) as engine:
            handle = await engine.start(thumbs, 3)
            assert await handle.result(timeout=30) == [0, 10, 20]
    finally:
        if proc.returncode is None:
            proc.terminate()
        rest = (await asyncio.wait_for(proc.stdout.read(), 60)).decode()
        assert await proc.wait() == 0, rest
