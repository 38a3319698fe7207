"""The HTTP server and client on SQLite (issue 17 targets).

    .venv/bin/python benchmarks/server_http.py [--latency-samples 300] [--starts 4000]
        [--load httpx,raw,wrk] [--wrk-seconds 5] [--no-ceiling]

Runs ``pyweft serve`` (uvicorn, one process, SQLite with the default FULL sync) on a
fresh database, then from this process:

* start -> result of a 3-activity workflow through ``pyweft.client.Client``, one at a
  time (the result is a long poll): p50/p90/p99;
* starts over HTTP/1.1 keep-alive from 32 concurrent connections: runs started per
  second, driven by each load generator named in ``--load``:

  - ``httpx``: 32 ``pyweft.client.Client`` objects (httpx), as an application would;
  - ``raw``: 32 bare asyncio stream connections sending a prepared request and reading
    the answer by its Content-Length (a light generator in Python);
  - ``wrk``: Debian's ``wrk`` (C, one thread, 32 connections, ``--wrk-seconds`` long);
    skipped with a notice when ``wrk`` is not on PATH (``apt-get install wrk``).

  Each generator drives its own fresh server and database (the first one also runs
  the latency phase), with the same body as ``Client.start("waits")``: the server
  picks a fresh id for each, so every request creates a run. Each line also prints the
  server's CPU per start (user + system time of the server process from /proc, over
  the load phase, divided by the runs the store gained; and of its event-loop thread
  alone, which every request needs while the store's threads run beside it), the
  load generator's CPU per start, and the load average: the CPU figures move far
  less with the machine's load than the rates do.

Then the same generators drive a bare Starlette ``POST`` on uvicorn (the ceiling: what
uvicorn and the generator allow on this machine before pyweft does any work).
Client and server share the machine's two cores, so every rate includes the load
generator's own CPU; the lighter the generator, the more the rate measures the server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from pyweft.client import Client

APP = """
import os

from pyweft import Engine, WorkflowContext, activity, workflow

@activity
async def noop(x: int) -> int:
    return x + 1

@workflow
async def three(ctx: WorkflowContext, x: int) -> int:
    for _ in range(3):
        x = await ctx.run(noop, x)
    return x

@workflow
async def waits(ctx: WorkflowContext) -> None:
    await ctx.wait_for_signal("never")

engine = Engine("sqlite:///" + os.environ["BENCH_DB"], workflows=[three, waits])
"""


BARE = """
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

async def ok(request):
    if request.method == "GET":
        if request.url.path.endswith("/aggregate"):
            return JSONResponse({"groups": []})
        return JSONResponse({"items": [], "next_cursor": None})
    await request.body()
    return JSONResponse({"id": "x"}, status_code=201)

app = Starlette(routes=[
    Route("/api/v1/workflows", ok, methods=["GET", "POST"]),
    Route("/api/v1/workflows/aggregate", ok, methods=["GET"]),
])
"""

# What Client.start("waits") sends (pyweft.client.wire.dumps of the same dict).
START_BODY = b'{"type":"waits","args":[]}'
START_PATH = "/api/v1/workflows"

WRK_SCRIPT = """
wrk.method = "POST"
wrk.body = '{body}'
wrk.headers["Content-Type"] = "application/json"

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("PYWEFT-WRK %d %d %d %d\\n", summary.requests, summary.duration,
    e.connect + e.read + e.write + e.timeout, e.status))
end
"""


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_s(pid: int, tid: int | None = None) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads), or of its thread
    ``tid`` alone, from /proc."""
    stat = Path(f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def load_average() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


async def wait_healthy(url: str, proc: subprocess.Popen[bytes], path: str) -> None:
    async with httpx.AsyncClient() as http:
        for _ in range(600):
            if proc.poll() is not None:
                raise SystemExit(f"server exited: {proc.returncode}")
            try:
                if (await http.get(url + path)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.05)
    raise SystemExit("server did not come up")


async def latency(url: str, samples: int) -> list[float]:
    out: list[float] = []
    async with Client(url) as client:
        for i in range(samples + 20):
            t0 = time.perf_counter()
            handle = await client.start("three", i)
            await handle.result(timeout=30)
            if i >= 20:  # warm-up excluded
                out.append((time.perf_counter() - t0) * 1000)
    return out


@dataclass(frozen=True)
class Load:
    """One load phase: requests answered, errors, wall seconds, generator CPU seconds."""

    requests: int
    errors: int
    seconds: float
    generator_cpu_s: float


async def httpx_load(port: int, total: int, clients: int, wrk_seconds: float) -> Load:
    per_client = total // clients
    pool = [Client(f"http://127.0.0.1:{port}") for _ in range(clients)]
    try:
        await asyncio.gather(*(c.list(limit=1) for c in pool))  # open each connection

        async def one(client: Client) -> None:
            for _ in range(per_client):
                await client.start("waits")

        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(one(c) for c in pool))
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        return Load(per_client * clients, 0, seconds, cpu)
    finally:
        await asyncio.gather(*(c.aclose() for c in pool))


def _request(port: int) -> bytes:
    return (
        f"POST {START_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(START_BODY)}\r\n\r\n"
    ).encode() + START_BODY


async def raw_load(port: int, total: int, clients: int, wrk_seconds: float) -> Load:
    """Keep-alive connections on bare asyncio streams: one request in flight on each."""
    per_client = total // clients
    request = _request(port)
    errors = 0
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(clients)]

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal errors
        for _ in range(per_client):
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = None
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            if length is None:
                raise SystemExit(f"answer without Content-Length: {head[:200]!r}")
            await reader.readexactly(length)
            if head[9:12] != b"201":
                errors += 1

    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one(r, w) for r, w in conns))
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    for _, writer in conns:
        writer.close()
    return Load(per_client * clients, errors, seconds, cpu)


async def wrk_load(port: int, total: int, clients: int, wrk_seconds: float) -> Load:
    wrk = shutil.which("wrk")
    assert wrk is not None
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(WRK_SCRIPT.replace("{body}", START_BODY.decode()))
    try:
        cpu0, t0 = children_cpu_s(), time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            wrk,
            "-t1",
            f"-c{clients}",
            f"-d{wrk_seconds:g}s",
            "--timeout",
            "10s",
            "-s",
            f.name,
            f"http://127.0.0.1:{port}{START_PATH}",
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await proc.communicate()
        cpu = children_cpu_s() - cpu0
        wall = time.perf_counter() - t0
    finally:
        os.unlink(f.name)
    line = next((ln for ln in out.decode().splitlines() if ln.startswith("PYWEFT-WRK ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"wrk failed ({proc.returncode}): {out.decode()[-500:]}")
    requests, duration_us, socket_errors, status_errors = map(int, line.split()[1:])
    del wall  # wrk's own duration excludes its start-up
    return Load(requests, socket_errors + status_errors, duration_us / 1e6, cpu)


LOADS: dict[str, Callable[[int, int, int, float], Awaitable[Load]]] = {
    "httpx": httpx_load,
    "raw": raw_load,
    "wrk": wrk_load,
}


async def stored_runs(url: str) -> int:
    async with httpx.AsyncClient() as http:
        resp = await http.get(url + "/api/v1/workflows/aggregate", params={"group_by": "status"})
        resp.raise_for_status()
        return sum(int(g["count"]) for g in resp.json()["groups"])


async def drive(name: str, port: int, pid: int, args: argparse.Namespace, *, ceiling: bool) -> None:
    url = f"http://127.0.0.1:{port}"
    before = 0 if ceiling else await stored_runs(url)
    cpu0, loop0 = cpu_s(pid), cpu_s(pid, pid)  # the main thread runs the event loop
    load = await LOADS[name](port, args.starts, args.clients, args.wrk_seconds)
    server_cpu, loop_cpu = cpu_s(pid) - cpu0, cpu_s(pid, pid) - loop0
    made = load.requests if ceiling else await stored_runs(url) - before
    what = "requests" if ceiling else "runs"
    label = (
        f"ceiling: bare Starlette POST on uvicorn, {name}, {args.clients} connections"
        if ceiling
        else f"starts over keep-alive, {name}, {args.clients} connections"
    )
    print(
        f"{label}: {load.requests / load.seconds:,.0f} {what}/s "
        f"({load.requests} in {load.seconds:.2f} s, {load.errors} errors); "
        f"CPU per {what[:-1]}: server {server_cpu / max(made, 1) * 1e6:,.0f} µs "
        f"({server_cpu / load.seconds:.0%} of a core; event-loop thread "
        f"{loop_cpu / max(made, 1) * 1e6:,.0f} µs), "
        f"{name} {load.generator_cpu_s / max(load.requests, 1) * 1e6:,.0f} µs; "
        f"{load_average()}",
        flush=True,
    )
    if not ceiling and not load.requests <= made <= load.requests + args.clients:
        # wrk stops with up to one request in flight per connection: those runs exist
        # but were not counted as answered; anything else is a miscount worth a look.
        print(f"  note: the store gained {made} runs for {load.requests} answered requests")


async def measure(
    port: int, proc: subprocess.Popen[bytes], args: argparse.Namespace, name: str, first: bool
) -> None:
    url = f"http://127.0.0.1:{port}"
    await wait_healthy(url, proc, "/api/v1/health")
    if first and args.latency_samples:
        lat = await latency(url, args.latency_samples)
        print(
            f"start->result, 3-activity workflow, client+uvicorn+SQLite: "
            f"p50 {statistics.median(lat):.2f} ms, p90 {pct(lat, 90):.2f} ms, "
            f"p99 {pct(lat, 99):.2f} ms ({len(lat)} samples); {load_average()}",
            flush=True,
        )
    await drive(name, port, proc.pid, args, ceiling=False)


async def ceiling(
    port: int, proc: subprocess.Popen[bytes], args: argparse.Namespace, name: str
) -> None:
    await wait_healthy(f"http://127.0.0.1:{port}", proc, "/api/v1/workflows")
    await drive(name, port, proc.pid, args, ceiling=True)


@contextlib.contextmanager
def served(command: list[str], cwd: Path, env: dict[str, str]) -> Iterator[tuple[int, Any]]:
    """A server process on a free port (``--port`` is appended); SIGTERM on the way out."""
    port = free_port()
    proc = subprocess.Popen(
        [*command, "--port", str(port)],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield port, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def loads(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in LOADS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown load generator(s): {', '.join(unknown)}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-samples", type=int, default=300)
    parser.add_argument("--starts", type=int, default=4000, help="per httpx/raw phase")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--load", type=loads, default=["httpx", "raw", "wrk"])
    parser.add_argument("--wrk-seconds", type=float, default=5.0)
    parser.add_argument("--no-ceiling", action="store_true")
    args = parser.parse_args()
    if "wrk" in args.load and shutil.which("wrk") is None:
        print("wrk not on PATH (apt-get install wrk): its phases are skipped")
        args.load = [n for n in args.load if n != "wrk"]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "benchapp.py").write_text(textwrap.dedent(APP))
        (tmp / "bareapp.py").write_text(textwrap.dedent(BARE))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYWEFT_")}
        pyweft = str(Path(sys.executable).parent / "pyweft")
        # Each generator gets a fresh server and database, so that no phase pays for the
        # runs an earlier one left in memory.
        for i, name in enumerate(args.load):
            env["BENCH_DB"] = str(tmp / f"{name}.db")
            with served([pyweft, "serve", "benchapp:engine"], tmp, env) as (port, proc):
                asyncio.run(measure(port, proc, args, name, first=i == 0))
        if args.no_ceiling:
            return
        for name in args.load:
            with served([sys.executable, "-m", "uvicorn", "bareapp:app"], tmp, env) as (
                port,
                proc,
            ):
                asyncio.run(ceiling(port, proc, args, name))


if __name__ == "__main__":
    main()
