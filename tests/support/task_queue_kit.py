"""The task-queue kill scenario shared by the crash test and its soak (tests/soak)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

PROC = Path(__file__).resolve().parents[1] / "crash" / "task_queue_proc.py"


def expected(x: int) -> list[int]:
    out = []
    for i in range(4):
        x = x * 3 + 1 if i % 2 == 0 else x * 5 + 2
        out.append(x)
    return out


def spawn(tmp: Path, name: str, *args: str) -> subprocess.Popen[bytes]:
    with open(tmp / f"{name}.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, str(PROC), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def lines(ledger: Path) -> list[list[str]]:
    if not ledger.exists():
        return []
    return [ln.split() for ln in ledger.read_text().splitlines() if ln.strip()]


def wait_for(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def kill_one_worker_midway(url: str, tmp_path: Path, *, n_workers: int, n_runs: int) -> None:
    """Engine + ``n_workers`` worker processes, ``n_runs`` runs of 4 tasks; SIGKILL w0 once it
    is busy; check every run's results, and that only w0's attempts ever ran twice."""
    ledger, out = tmp_path / "ledger", tmp_path / "results.json"
    busy = max(15, n_runs * 4 // (n_workers * 3))  # w0's share of the first third or so
    # Each its own store connection, none shares the engine's process.
    engine = spawn(tmp_path, "engine", "engine", url, str(ledger), str(n_runs), str(out))
    workers = {
        f"w{i}": spawn(tmp_path, f"w{i}", "worker", url, str(ledger), f"w{i}")
        for i in range(n_workers)
    }
    try:
        wait_for(
            lambda: (
                sum(1 for ln in lines(ledger) if ln[0] == "END" and ln[3] == "w0") >= busy
                or engine.poll() is not None
            ),
            60,
            "worker w0 to be busy",
        )
        workers["w0"].send_signal(signal.SIGKILL)
        workers["w0"].wait()
        killed_at = time.time()
        assert engine.wait(timeout=90) == 0, (tmp_path / "engine.log").read_text()[-3000:]
    finally:
        for proc in [engine, *workers.values()]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in workers.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    results = json.loads(out.read_text())
    assert results == [expected(i) for i in range(n_runs)]
    entries = lines(ledger)
    begins = Counter(ln[1] for ln in entries if ln[0] == "BEGIN")
    ends = Counter(ln[1] for ln in entries if ln[0] == "END")
    assert len(begins) == n_runs * 4
    # An attempt w0 had claimed when it died (its result unstored) runs again elsewhere:
    # at most once more, and only those, so no more than w0's 8 slots.
    by_w0 = {ln[1] for ln in entries if ln[0] == "BEGIN" and ln[3] == "w0"}
    repeated = {token for token, n in begins.items() if n > 1}
    for token, n in begins.items():
        limit = 2 if token in by_w0 else 1
        assert n <= limit, f"{token} began {n} times (w0 ran it: {token in by_w0})"
        assert ends[token] >= 1
    assert len(repeated) <= 8
    check_limits(entries, killed_at)
    # The survivors stopped cleanly on SIGTERM (they drain, then exit 0).
    for name, proc in workers.items():
        if name != "w0":
            assert proc.returncode == 0, (tmp_path / f"{name}.log").read_text()[-2000:]


def check_limits(entries: list[list[str]], killed_at: float) -> None:
    """No more than QA_CONCURRENCY attempts of qa ran at once (an attempt w0 never ended
    counts as running until w0 died: its slot was held longer still), and no window of
    QB_WINDOW_S saw more than QB_RATE starts of qb (claim times, as the slots count)."""
    sys.path.insert(0, str(PROC.parent))
    from task_queue_proc import QA_CONCURRENCY, QB_RATE, QB_WINDOW_S

    spans: dict[tuple[str, str, str], list[float]] = {}
    for kind, token, attempt, who, at, queue, _ in entries:
        if queue == "qa":
            spans.setdefault((token, attempt, who), [0.0, killed_at])[
                0 if kind == "BEGIN" else 1
            ] = float(at)
    edges = sorted([(b, 1) for b, _ in spans.values()] + [(e, -1) for _, e in spans.values()])
    running = peak = 0
    for _, step in edges:  # an end at the same instant as a begin counts first
        running += step
        peak = max(peak, running)
    assert 0 < peak <= QA_CONCURRENCY, f"qa ran {peak} attempts at once"
    claimed = sorted({(float(c), token, attempt) for k, token, attempt, _, _, q, c in entries
                      if k == "BEGIN" and q == "qb"})  # fmt: skip
    times = [c for c, _, _ in claimed]
    for i in range(len(times) - QB_RATE):
        assert times[i + QB_RATE] - times[i] >= QB_WINDOW_S - 1e-6, "qb passed its rate limit"
