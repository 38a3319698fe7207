"""``pyweft worker MODULE --server URL --token KEY``: a worker over the task stream,
started from the command line, serves a run and drains on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from pyweft import Engine, WorkflowContext, workflow
from pyweft.server import ServerAuth, create_app
from pyweft.server.keys import ApiKeyStore
from support.poll import eventually

CRASH = Path(__file__).parents[1] / "crash"
sys.path.insert(0, str(CRASH))
sys.path.insert(0, str(Path(__file__).parents[1] / "server"))
from live import serve_app  # noqa: E402
from remote_worker_proc import linger  # noqa: E402


@workflow
async def linger_twice(ctx: WorkflowContext, x: int) -> int:
    return await ctx.run(linger, await ctx.run(linger, x))


def spawn(log_path: Path, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "pyweft.cli.main", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )


async def test_the_cli_worker_with_server_serves_runs_and_drains_on_sigterm(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    ledger = tmp_path / "ledger"
    async with Engine(url, workflows=[linger_twice], serve_queues=[], poll_interval=0.05) as eng:
        _, token = await ApiKeyStore(eng.storage).create(subject="w", scopes=["workers:write"])
        app = create_app(eng, auth=ServerAuth())
        async with serve_app(app) as base:
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join([str(CRASH), os.environ.get("PYTHONPATH", "")]),
                "REMOTE_LEDGER": str(ledger),
                "LINGER_S": "0.3",
                "PYWEFT_TOKEN": token,
            }
            env.pop("PYWEFT_DATABASE_URL", None)
            args = ["worker", "remote_worker_proc", "--server", base, "--queue", "remote"]
            proc = spawn(tmp_path / "cli.log", args, env)
            try:
                handle = await eng.start(linger_twice, 1)
                assert await handle.result(timeout=30) == 201
                (info,) = await eng.workers()
                assert info.queues == ("remote",) and info.activities == ("linger",)
                second = await eng.start(linger_twice, 5)
                await eventually(
                    lambda: len(ledger.read_text().splitlines()) >= 5,
                    timeout=20,
                    what="the second run's first attempt",
                )
                proc.send_signal(signal.SIGTERM)  # mid-attempt: it finishes it, then exits
                assert await asyncio.to_thread(proc.wait, 20) == 0, (
                    tmp_path / "cli.log"
                ).read_text()
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            out = (tmp_path / "cli.log").read_text()
            assert "serves remote via ws://127.0.0.1" in out
            # The drained attempt was finished and stored: the run goes on at its next step.
            history = await eng.history(second.id)
            assert history.steps[0].status == "completed" and history.steps[0].attempts == 1
