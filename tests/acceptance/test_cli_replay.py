"""``pyweft workflows export`` then ``pyweft replay`` against new code, as in CI."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from pyweft import Engine

PYWEFT = [sys.executable, "-m", "pyweft.cli.main"]

V1 = textwrap.dedent(
    """
    from pyweft import WorkflowContext, activity, workflow

    @activity
    async def pick(item: str) -> str:
        return "picked " + item

    @activity
    async def pack(item: str) -> str:
        return "packed " + item

    @workflow(name="fulfil")
    async def fulfil(ctx: WorkflowContext, item: str) -> list[str]:
        return [await ctx.run(pick, item), await ctx.run(pack, item)]
    """
)
V2 = V1.replace(
    "[await ctx.run(pick, item), await ctx.run(pack, item)]",
    "[await ctx.run(pack, item), await ctx.run(pick, item)]",
)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYWEFT_")}
    env.update(COLUMNS="200", NO_COLOR="1", PYTHONPATH=str(cwd))
    return subprocess.run(
        [*PYWEFT, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


async def record(db: str, cwd: Path) -> None:
    sys.path.insert(0, str(cwd))
    try:
        module = importlib.import_module("app_v1")
        async with Engine(db, workflows=[module.fulfil]) as engine:
            handle = await engine.start(module.fulfil, "mug", id="f-1")
            await handle.result(timeout=10)
    finally:
        sys.path.remove(str(cwd))
        sys.modules.pop("app_v1", None)


def test_export_then_replay_passes_the_same_code_and_fails_a_reorder(tmp_path: Path) -> None:
    (tmp_path / "app_v1.py").write_text(V1)
    (tmp_path / "app_v2.py").write_text(V2)
    db = f"sqlite:///{tmp_path / 'prod.db'}"
    asyncio.run(record(db, tmp_path))

    exported = cli("workflows", "export", "f-1", "--out", "h.json", "--db", db, cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    history = json.loads((tmp_path / "h.json").read_text())
    assert history["workflow_id"] == "f-1" and history["steps"] == 2

    same = cli("replay", "h.json", "--app", "app_v1", cwd=tmp_path)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "1 of 1 history(ies) replay cleanly" in same.stdout

    moved = cli("replay", "h.json", "--app", "app_v2", "--json", cwd=tmp_path)
    assert moved.returncode == 1
    report = json.loads(moved.stdout)
    assert report["ok"] is False
    [result] = report["results"]
    assert result["step"] == 1 and result["error_type"] == "NonDeterminismError"
    assert "pick" in result["message"] and "pack" in result["message"]

    missing = cli("workflows", "export", "nope", "--db", db, cwd=tmp_path)
    assert missing.returncode == 1 and "WorkflowNotFoundError" in missing.stderr
    no_app = cli("replay", "h.json", cwd=tmp_path)
    assert no_app.returncode == 2 and "--app" in no_app.stderr
