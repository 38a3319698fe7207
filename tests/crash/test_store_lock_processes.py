"""One engine per SQLite file, and a restarted engine taking its work back at once,
with real processes (``restart_worker.py``), real files and SIGKILL.

Each worker appends ``KIND PID TIME TEXT`` lines to a shared ledger (see the
worker's docstring); the tests read who executed what, and when.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

WORKER = Path(__file__).resolve().parent / "restart_worker.py"
SLEEP_S = 4.0
TTL_S = 30.0  # the default: the fast path must not depend on it
FAST_S = 2.5  # "within a couple of seconds of the sleep's end"


@dataclass(frozen=True, slots=True)
class Line:
    kind: str
    pid: int
    at: float
    text: str


@dataclass(slots=True)
class Worker:
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])


class Lab:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.db = tmp / "app.db"
        self.ledger = tmp / "ledger.txt"
        self.workers: list[Worker] = []

    def launch(self, name: str, **cfg: Any) -> Worker:
        config = {"url": f"sqlite:///{self.db}", "ledger": str(self.ledger), "sleep_s": SLEEP_S}
        config.update(cfg)
        log = self.tmp / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, str(WORKER), json.dumps(config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        worker = Worker(proc, log)
        self.workers.append(worker)
        return worker

    def lines(self, kind: str | None = None, pid: int | None = None) -> list[Line]:
        if not self.ledger.exists():
            return []
        out = []
        for raw in self.ledger.read_text().splitlines():
            k, p, at, text = raw.split(" ", 3)
            if (kind is None or k == kind) and (pid is None or int(p) == pid):
                out.append(Line(k, int(p), float(at), text))
        return out

    async def wait_line(self, kind: str, worker: Worker, timeout: float = 30.0) -> Line:
        deadline = time.monotonic() + timeout
        while True:
            found = self.lines(kind, worker.pid)
            if found:
                return found[0]
            if worker.proc.poll() is not None:
                raise AssertionError(
                    f"worker {worker.pid} exited ({worker.proc.returncode}) before {kind}:\n"
                    f"{worker.tail()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no {kind} from {worker.pid} after {timeout}s\n{worker.tail()}"
                )
            await asyncio.sleep(0.01)

    async def exit_code(self, worker: Worker, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while worker.proc.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"worker {worker.pid} still running:\n{worker.tail()}")
            await asyncio.sleep(0.02)
        return worker.proc.returncode

    def kill(self, worker: Worker) -> None:
        worker.proc.send_signal(signal.SIGKILL)
        worker.proc.wait()  # reaped: its pid is gone, as after a real crash


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    lab = Lab(tmp_path)
    try:
        yield lab
    finally:
        for w in lab.workers:
            if w.proc.poll() is None:
                w.proc.kill()
            w.proc.wait()


RUNS = ["r1", "r2", "r3"]


async def test_two_processes_with_default_options_cannot_both_drive_a_file(lab: Lab) -> None:
    a = lab.launch("A", start=RUNS, wait_for=RUNS)
    await lab.wait_line("OPEN", a)
    b = lab.launch("B", start=RUNS, wait_for=RUNS)
    refused = await lab.wait_line("REFUSED", b)
    assert await lab.exit_code(b) == 3
    assert f"pid_{a.pid}_on" in refused.text  # the holder is named
    assert lab.lines("EXEC", b.pid) == [] and lab.lines("OPEN", b.pid) == []
    assert await lab.exit_code(a) == 0, a.tail()
    executed = Counter(line.text for line in lab.lines("EXEC"))
    assert executed == Counter({f"{r}/{label}": 1 for r in RUNS for label in ("before", "after")})
    # Released on a clean shutdown: the next engine opens at once.
    c = lab.launch("C", wait_for=RUNS)
    assert await lab.exit_code(c) == 0, c.tail()
    assert lab.lines("REFUSED", c.pid) == []


async def test_the_kernel_releases_the_lock_of_a_killed_engine(lab: Lab) -> None:
    a = lab.launch("A", start=["r1"], wait_for=["r1"])
    await lab.wait_line("ASLEEP", a)
    lab.kill(a)
    b = lab.launch("B", wait_for=["r1"])
    await lab.wait_line("OPEN", b)
    assert await lab.exit_code(b) == 0, b.tail()
    assert [line.text for line in lab.lines("EXEC")] == ["r1/before", "r1/after"]


@pytest.mark.parametrize("mode", ["lease", "workflow-lease"])
async def test_a_restarted_engine_takes_its_work_back_at_once_after_sigkill(
    lab: Lab, mode: str
) -> None:
    a = lab.launch("A", ownership=mode, start=["r1"], wait_for=["r1"])
    asleep = await lab.wait_line("ASLEEP", a)
    lab.kill(a)  # its lease/claims stay live in the store for TTL_S more seconds
    b = lab.launch("B", ownership=mode, wait_for=["r1"])
    done = await lab.wait_line("DONE", b, timeout=TTL_S + 30)
    sleep_end = asleep.at + SLEEP_S
    late = done.at - sleep_end
    print(f"{mode}: finished {late:.2f}s after the sleep's end (TTL {TTL_S:.0f}s)")
    assert late < FAST_S, f"finished {late:.2f}s after the sleep's end:\n{b.tail()}"
    assert await lab.exit_code(b) == 0
    assert [line.text for line in lab.lines("EXEC")] == ["r1/before", "r1/after"]
    assert "earlier incarnation" in b.log.read_text() or mode == "workflow-lease"


async def test_a_live_engine_with_the_same_engine_id_keeps_its_lease(lab: Lab) -> None:
    a = lab.launch("A", ownership="lease", engine_id="shop", start=["r1"], wait_for=["r1"])
    await lab.wait_line("ASLEEP", a)
    b = lab.launch("B", ownership="lease", engine_id="shop", wait_for=["r1"])
    await lab.wait_line("OPENING", b)
    # B waits for the lease (and says for whom); A, alive, finishes its run.
    assert await lab.exit_code(a) == 0, a.tail()
    assert (
        lab.lines("OPEN", b.pid) == []
        or lab.lines("OPEN", b.pid)[0].at > lab.lines("BYE", a.pid)[0].at
    )
    assert await lab.exit_code(b) == 0, b.tail()
    log = b.log.read_text()
    assert "waiting for the store lease" in log and f"pid {a.pid}" in log
    assert [line.text for line in lab.lines("EXEC")] == ["r1/before", "r1/after"]
