"""Helpers for the messaging SIGKILL tests (``tests/crash/test_sigkill_messages.py``).

Builds on :mod:`support.crashkit`: the same append-only ledger (one
``os.write`` per line on an ``O_APPEND`` descriptor, fsynced), the same
``KIND LIFETIME RUN LABEL N TIME`` line format and the same
:class:`~support.crashkit.WorkerProcess` to start, kill and clean up workers.

Extra ledger kinds written by ``tests/crash/messages_worker.py``:

``KILL  lifetime key  before|after 0``  the storage kill switch fired at a batch
                                       touching ``key`` (before / after applying it)
``SEEN  lifetime run  payload  step``   the workflow got ``payload`` back from a
                                       ``wait_for_signal`` (replays included)
``SEND  lifetime run  payload  i``      a sender coroutine is about to call the engine
``ACK   lifetime run  answer   i``      that call returned: the message is acknowledged
``OUT   lifetime run  outcome  0``      the worker saw the run end with ``outcome``
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from support import crashkit as kit

WORKER = Path(__file__).resolve().parents[1] / "crash" / "messages_worker.py"
POLL_S = 0.05  # Engine(poll_interval=...) of every process: cross-process messages land fast


class MessageLedger(kit.Ledger):
    """The worker's ledger, with the messaging kinds (every line fsynced)."""

    def note(self, kind: str, run: str, text: str, n: int = 0, *, sync: bool = True) -> None:
        """Append one line. ``sync=False`` skips the fsync: only SIGKILL is simulated and
        the page cache survives it (what ``Ledger.mark`` does for lines written on replay)."""
        if " " in run or " " in text or not text:
            raise ValueError(
                f"ledger fields must be non-empty and free of spaces: {run!r} {text!r}"
            )
        with self._lock:
            self._write(kind, run, text, n, sync=sync)


def notes(ledger: Path, kind: str, lifetime: str | None = None) -> list[kit.Event]:
    return [
        e
        for e in kit.read_ledger(ledger)
        if e.kind == kind and (lifetime is None or e.lifetime == lifetime)
    ]


def launch(
    tmp: Path,
    db: Path | str,
    ledger: Path,
    lifetime: str,
    *,
    workflow: str,
    runs: Sequence[str],
    trigger: str | None = None,
    updates: int = 0,
    finish: bool = False,
) -> kit.WorkerProcess:
    """Start ``messages_worker.py serve``: it drives ``runs`` of ``workflow`` until they end."""
    args = ["serve", str(db), str(ledger), lifetime, workflow, ",".join(runs)]
    if trigger is not None:
        args += ["--trigger", trigger]
    if updates:
        args += ["--updates", str(updates)]
    if finish:
        args.append("--finish")
    return _spawn(tmp, ledger, lifetime, args)


def launch_sender(
    tmp: Path,
    db: Path | str,
    ledger: Path,
    lifetime: str,
    *,
    kind: str,
    workflow_id: str,
    name: str,
    key: str,
    coroutines: int,
    go: Path,
) -> kit.WorkerProcess:
    """Start ``messages_worker.py send``: ``coroutines`` concurrent calls, all fired once
    the file ``go`` exists."""
    args = ["send", str(db), str(ledger), lifetime, kind, workflow_id, name, key]
    args += ["--coroutines", str(coroutines), "--go", str(go)]
    return _spawn(tmp, ledger, lifetime, args)


def _spawn(tmp: Path, ledger: Path, lifetime: str, args: list[str]) -> kit.WorkerProcess:
    log = tmp / f"proc-{lifetime}.log"
    offset = ledger.stat().st_size if ledger.exists() else 0
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "CRASHKIT_LIFETIME": lifetime},
        )
    return kit.WorkerProcess(proc, lifetime, log, offset)


async def ready(worker: kit.WorkerProcess, ledger: Path, timeout: float = 30.0) -> None:
    """Wait (off the event loop) for the worker's START line: its engine is open, runs exist."""
    await asyncio.to_thread(kit.wait_ready, worker, ledger, timeout)


async def exited(worker: kit.WorkerProcess, timeout: float) -> int:
    """The worker's exit code, waiting up to ``timeout`` seconds for it to end on its own."""
    deadline = time.monotonic() + timeout
    while worker.proc.poll() is None:
        if time.monotonic() > deadline:
            worker.ensure_dead()
            raise AssertionError(
                f"{worker.lifetime} still running after {timeout}s:\n{worker.log_tail()}"
            )
        await asyncio.sleep(0.01)
    return worker.proc.returncode


def log_problems(workers: Sequence[kit.WorkerProcess]) -> list[str]:
    """Workers whose output shows an error or a traceback (a SIGKILL leaves neither)."""
    found = []
    for w in workers:
        text = w.log.read_text(errors="replace") if w.log.exists() else ""
        if any(word in text for word in ("ERROR", "CRITICAL", "Traceback")):
            found.append(f"{w.lifetime} logged:\n{w.log_tail()}")
    return found
