"""Workflow queue proof: 3 engine processes on PostgreSQL share one queue (issue 14).

The runs themselves count how many of them work at once (``support.queuekit``):
never more than the queue's ``concurrency``, on any engine, including after one
engine is SIGKILLed mid-run. The killed engine's slots come back when the other
engines take its runs over and finish them; priorities and deduplication hold.
``tests/soak/test_queue_soak.py`` runs the same with 500 runs.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyweft import Engine, QueueDeduplicatedError
from support import queuekit
from support.backends import postgres_schema, with_schema

WORKER = Path(__file__).resolve().parent / "queue_worker.py"
URGENT = 10  # runs enqueued last with priority 0: they must start among the first


async def _enqueue(url: str, runs: int) -> None:
    async with Engine(
        url, workflows=[queuekit.queued_job], queues=[queuekit.QUEUE], role="client"
    ) as client:
        for i in range(runs - URGENT):
            await client.enqueue(
                queuekit.QUEUE, queuekit.queued_job, f"r{i}", id=f"r{i}", priority=5,
                deduplication_id=f"order-{i}",
            )  # fmt: skip
        for i in range(URGENT):
            await client.enqueue(
                queuekit.QUEUE, queuekit.queued_job, f"hi{i}", id=f"hi{i}", priority=0
            )
        for i in range(0, runs - URGENT, 7):  # a second enqueue of an order is refused
            with pytest.raises(QueueDeduplicatedError):
                await client.enqueue(
                    queuekit.QUEUE, queuekit.queued_job, "dup", deduplication_id=f"order-{i}"
                )


async def _settled(url: str, runs: int, deadline: float) -> tuple[dict[str, int], int, int]:
    async with Engine(url, workflows=[queuekit.queued_job], role="client") as client:
        while True:
            counts = {g.key: g.count for g in await client.aggregate(group_by="status")}
            if counts.get("completed", 0) == runs or time.monotonic() > deadline:
                info = await client.queue_info("proof")
                return counts, info.depth, info.in_flight
            await asyncio.sleep(0.1)


def _start(url: str, schema: str, count: int) -> list[subprocess.Popen[str]]:
    """``count`` engine processes, started together, once all are open."""
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), url, schema, f"engine-{n}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for n in range(count)
    ]
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "OPEN"
    return procs


def run_proof(runs: int, timeout_s: float) -> None:
    with postgres_schema() as (url, schema):
        engine_url = with_schema(url, schema)
        queuekit.create_tables(url, schema)
        asyncio.run(_enqueue(engine_url, runs))
        engines: list[subprocess.Popen[str]] = []
        try:
            engines = _start(url, schema, 3)
            deadline = time.monotonic() + timeout_s
            victim = engines[0]
            probe = queuekit.Probe(url, schema)
            try:
                while probe.started() < runs // 4 or not probe.working_in(victim.pid):
                    assert time.monotonic() < deadline, "the queue did not get going"
            finally:
                probe.close()
            victim.send_signal(signal.SIGKILL)  # mid-run: its runs hold their slots
            victim.wait()
            counts, depth, in_flight = asyncio.run(_settled(engine_url, runs, deadline))
        finally:
            for proc in engines:
                if proc.poll() is None:
                    proc.terminate()
            for proc in engines:
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                if proc.stdout is not None:
                    proc.stdout.close()
        peak, order, excess = queuekit.read_results(url, schema)
    assert counts == {"completed": runs}, counts
    assert (depth, in_flight) == (0, 0)  # the killed engine's slots came back
    # Reached, and never passed, on any engine (pids: the killed engine first).
    pids = [proc.pid for proc in engines]
    assert peak == queuekit.CONCURRENCY, f"engines {pids}, {len(excess)} over: {excess[:5]}"
    assert len(order) == runs
    urgent = [order.index(f"hi{i}") for i in range(URGENT)]
    # Enqueued last, started first: all within the first batch of starts (each engine
    # may have had a full queue's worth of lower-priority runs in flight already).
    assert max(urgent) < URGENT + 3 * queuekit.CONCURRENCY, urgent


@pytest.mark.postgres
def test_three_engines_never_run_more_than_the_queue_allows_even_after_a_kill() -> None:
    run_proof(runs=60, timeout_s=60)
