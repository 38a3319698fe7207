"""One fleet SSE feed, many subscribers (issue 17 target: p99 delivery lag <= 100 ms for
1,000 subscribers at 1,000 events/s).

    .venv/bin/python benchmarks/sse_fanout.py [--subscribers 1000] [--rate 1000] [--seconds 10]

Runs ``pyweft serve`` (uvicorn, one process, ``memory://`` store so the store's fsyncs do
not compete with the feed for the two cores) and, from this process:

* opens ``--subscribers`` real HTTP/1.1 connections to ``GET /api/v1/events/sse``;
* starts runs of a workflow with several no-op activities over HTTP, paced so the
  engine emits about ``--rate`` events per second (the events per run are counted
  with one run first);
* every subscriber reads everything; every 10th one (the probes) parses every event
  and records its lag: arrival time here minus the event's ``at`` (the engine's clock
  when it emitted the event; same machine, same clock);
* checks every subscriber got every event of the window (no loss, no repeat).

Prints p50/p90/p99/max lag over the probes, events/s achieved, and the CPU used by the
server process and by this (client) process, which share the same two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx

APP = """
from pyweft import Engine, WorkflowContext, activity, workflow

@activity
async def noop(x: int) -> int:
    return x + 1

@workflow
async def ticks(ctx: WorkflowContext, n: int) -> int:
    x = 0
    for _ in range(n):
        x = await ctx.run(noop, x)
    return x

engine = Engine("memory://", workflows=[ticks])
"""

EVENT = re.compile(rb'event: event\nid: (\S+)\ndata: \{[^\n]*?"at":"([^"]+)"')
STEPS_PER_RUN = 8


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Subscriber:
    """One SSE connection read with bare asyncio streams (a light client, so the
    client's own CPU disturbs the server as little as it can)."""

    parsed_at: dict[bytes, float] = {}

    def __init__(self, probe: bool) -> None:
        self.probe = probe
        self.ids: list[bytes] = []
        self.count = 0
        self.lags: list[tuple[float, float]] = []  # (emitted at, lag)
        self.connected = asyncio.Event()

    async def run(self, port: int, stop: asyncio.Event) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
        writer.write(
            b"GET /api/v1/events/sse HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Accept: text/event-stream\r\n\r\n"
        )
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        if b" 200 " not in head.split(b"\r\n", 1)[0]:
            raise SystemExit(f"subscribe failed: {head[:200]!r}")
        buffer = b""
        while not stop.is_set():
            chunk = await reader.read(1 << 20)  # the task is cancelled at the end
            if not chunk:
                break
            now = time.time()
            buffer += chunk
            if not self.connected.is_set() and b": connected" in buffer:
                self.connected.set()
            cut = buffer.rfind(b"\n\n")
            if cut < 0:
                continue
            done, buffer = buffer[: cut + 2], buffer[cut + 2 :]
            if self.probe:
                for cursor, at in EVENT.findall(done):
                    emitted = self.parsed_at.get(at)
                    if emitted is None:
                        emitted = datetime.fromisoformat(at.decode()).timestamp()
                        self.parsed_at[at] = emitted
                    self.ids.append(cursor)
                    self.lags.append((emitted, now - emitted))
            self.count += done.count(b"event: event\n")
        writer.close()


async def produce(url: str, rate_runs: float, seconds: float, steps: int) -> int:
    """Start runs at ``rate_runs`` per second, at most 64 starts in flight: a server
    slower than the target is measured at the rate it manages (printed), not flooded."""
    started = 0
    gate = asyncio.Semaphore(64)
    timeout = httpx.Timeout(60.0, pool=None)
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as http:

        async def one(number: int) -> None:
            # An id and use_existing make a retry safe: the server may close an idle
            # keep-alive connection just as it is reused (a busy machine idles them).
            body = {
                "type": "ticks",
                "args": [steps],
                "id": f"fan-{number}",
                "on_conflict": "use_existing",
            }
            try:
                for attempt in range(3):
                    try:
                        await http.post("/api/v1/workflows", json=body)
                        return
                    except httpx.TransportError:
                        if attempt == 2:
                            raise
            finally:
                gate.release()

        begin = time.perf_counter()
        in_flight: set[asyncio.Task[None]] = set()
        while (elapsed := time.perf_counter() - begin) < seconds:
            due = int(elapsed * rate_runs) + 1
            while started < due and elapsed < seconds:
                await gate.acquire()
                task = asyncio.create_task(one(started))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                started += 1
                elapsed = time.perf_counter() - begin
            await asyncio.sleep(0.005)
        if in_flight:
            await asyncio.gather(*in_flight)
    return started


async def wait_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    async with httpx.AsyncClient() as http:
        for _ in range(300):
            if proc.poll() is not None:
                raise SystemExit(f"server exited: {proc.returncode}")
            try:
                if (await http.get(url + "/api/v1/health")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit("server did not come up")


async def events_per_run(url: str, port: int) -> int:
    sub = Subscriber(probe=True)
    stop = asyncio.Event()
    task = asyncio.create_task(sub.run(port, stop))
    await sub.connected.wait()
    async with httpx.AsyncClient(base_url=url) as http:
        run = (
            await http.post("/api/v1/workflows", json={"type": "ticks", "args": [STEPS_PER_RUN]})
        ).json()
        await http.get(f"/api/v1/workflows/{run['id']}/result", params={"wait": 10})
    await asyncio.sleep(0.5)
    stop.set()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return sub.count


async def measure(url: str, port: int, pid: int, args: argparse.Namespace) -> None:
    await wait_healthy(url, subprocess_proc)
    per_run = await events_per_run(url, port)
    print(f"events per run of ticks({STEPS_PER_RUN}): {per_run}")
    stop = asyncio.Event()
    subs = [Subscriber(probe=i % 10 == 0) for i in range(args.subscribers)]
    tasks = []
    for i in range(0, len(subs), 100):  # connect in waves, as a fleet of dashboards would
        batch = subs[i : i + 100]
        tasks += [asyncio.create_task(s.run(port, stop)) for s in batch]
        await asyncio.gather(*(s.connected.wait() for s in batch))
    print(f"{len(subs)} subscribers connected")
    Subscriber.parsed_at.clear()
    server_cpu0, client_cpu0, wall0 = cpu_s(pid), time.process_time(), time.time()
    runs = await produce(url, args.rate / per_run, args.seconds, STEPS_PER_RUN)
    produced_until = time.time()
    await asyncio.sleep(2.0)  # let the last events drain
    server_cpu, client_cpu = cpu_s(pid) - server_cpu0, time.process_time() - client_cpu0
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    wall = produced_until - wall0
    probes = [s for s in subs if s.probe]
    lags = [lag * 1000 for s in probes for at, lag in s.lags if wall0 <= at <= produced_until]
    counts = [s.count for s in subs]
    reference = probes[0].ids
    same = all(p.ids == reference for p in probes)
    unique = len(set(reference)) == len(reference)
    print(f"runs started: {runs}; events delivered per subscriber: {min(counts)}..{max(counts)}")
    print(f"every probe saw the same events in the same order, none twice: {same and unique}")
    print(f"event rate: {len(reference) / wall:,.0f} events/s over {wall:.1f} s")
    print(
        f"delivery lag over {len(lags):,} (probe, event) pairs: "
        f"p50 {statistics.median(lags):.1f} ms, p90 {pct(lags, 90):.1f}, "
        f"p99 {pct(lags, 99):.1f}, max {max(lags):.1f}"
    )
    print(
        f"CPU: server {server_cpu:.1f} s ({100 * server_cpu / (wall + 2):.0f}% of one core), "
        f"client {client_cpu:.1f} s ({100 * client_cpu / (wall + 2):.0f}%)"
    )
    print(f"load average: {os.getloadavg()[0]:.1f}")


subprocess_proc: subprocess.Popen[bytes]


def main() -> None:
    global subprocess_proc
    parser = argparse.ArgumentParser()
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=1000.0, help="target events per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    pyweft = str(Path(sys.executable).with_name("pyweft"))
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "fanapp.py").write_text(APP)
        port = free_port()
        log = Path(tmp, "server.log").open("wb")  # noqa: SIM115 - closed after the server
        # SSE_FANOUT_PROFILE=out.prof runs the server under cProfile (for finding hot spots).
        profile = os.environ.get("SSE_FANOUT_PROFILE")
        wrap = [sys.executable, "-m", "cProfile", "-o", profile] if profile else []
        subprocess_proc = subprocess.Popen(
            [*wrap, pyweft, "serve", "fanapp:engine", "--port", str(port), "--no-dashboard"],
            cwd=tmp,
            env={**os.environ, "PYTHONPATH": tmp},
            # The access log goes to a file: a pipe read by a busy terminal blocks
            # the server's event loop on every line it writes.
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            asyncio.run(measure(f"http://127.0.0.1:{port}", port, subprocess_proc.pid, args))
        finally:
            subprocess_proc.send_signal(signal.SIGTERM)
            subprocess_proc.wait(timeout=30)
            log.close()
            warnings = [
                line
                for line in Path(tmp, "server.log").read_text().splitlines()
                if "blocked" in line or "Error" in line
            ]
            print(f"server log: {len(warnings)} warning/error lines", *warnings[:3], sep="\n  ")


if __name__ == "__main__":
    main()
