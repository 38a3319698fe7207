"""The HTTP server and client on SQLite (issue 17 targets).

    .venv/bin/python benchmarks/server_http.py [--latency-samples 300] [--starts 4000]

Runs ``pyweft serve`` (uvicorn, one process, SQLite with the default FULL sync) on a
fresh database, then from this process:

* start -> result of a 3-activity workflow through ``pyweft.client.Client``, one at a
  time (the result is a long poll): p50/p90/p99;
* starts over HTTP/1.1 keep-alive from 32 concurrent clients (each its own
  ``Client`` and connection): runs started per second.

Client and server share the machine's two cores, so both numbers include the
client's own CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx

from pyweft.client import Client

APP = """
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

engine = Engine("sqlite:///{db}", workflows=[three, waits])
"""


BARE = """
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

async def ok(request):
    if request.method == "GET":
        return JSONResponse({"items": [], "next_cursor": None})
    return JSONResponse({"id": "x"}, status_code=201)

app = Starlette(routes=[Route("/api/v1/workflows", ok, methods=["GET", "POST"])])
"""


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    async with httpx.AsyncClient() as http:
        for _ in range(600):
            if proc.poll() is not None:
                raise SystemExit(f"server exited: {proc.returncode}")
            try:
                if (await http.get(url + "/api/v1/health")).status_code == 200:
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


async def starts_per_second(url: str, total: int, clients: int) -> float:
    per_client = total // clients
    pool = [Client(url) for _ in range(clients)]
    try:
        await asyncio.gather(*(c.list(limit=1) for c in pool))  # open each connection

        async def one(client: Client) -> None:
            for _ in range(per_client):
                await client.start("waits")

        t0 = time.perf_counter()
        await asyncio.gather(*(one(c) for c in pool))
        return per_client * clients / (time.perf_counter() - t0)
    finally:
        await asyncio.gather(*(c.aclose() for c in pool))


async def measure(url: str, proc: subprocess.Popen[bytes], args: argparse.Namespace) -> None:
    await wait_healthy(url, proc)
    lat = await latency(url, args.latency_samples)
    print(
        f"start->result, 3-activity workflow, client+uvicorn+SQLite: "
        f"p50 {statistics.median(lat):.2f} ms, p90 {pct(lat, 90):.2f} ms, "
        f"p99 {pct(lat, 99):.2f} ms ({len(lat)} samples)"
    )
    rate = await starts_per_second(url, args.starts, args.clients)
    print(f"starts over keep-alive from {args.clients} clients: {rate:,.0f} runs/s")


async def ceiling(url: str, proc: subprocess.Popen[bytes], total: int, clients: int) -> None:
    """The same 32-client POST loop against a bare Starlette app on uvicorn: what the
    machine, uvicorn and httpx allow today, before pyweft does any work."""
    async with httpx.AsyncClient() as http:
        for _ in range(600):
            try:
                await http.post(url + "/api/v1/workflows")
                break
            except httpx.HTTPError:
                await asyncio.sleep(0.05)
    rate = await starts_per_second(url, total, clients)
    print(f"ceiling: bare Starlette POST on uvicorn, {clients} clients: {rate:,.0f} requests/s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-samples", type=int, default=300)
    parser.add_argument("--starts", type=int, default=4000)
    parser.add_argument("--clients", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "benchapp.py").write_text(textwrap.dedent(APP).replace("{db}", str(tmp / "b.db")))
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYWEFT_")}
        pyweft = str(Path(sys.executable).parent / "pyweft")
        proc = subprocess.Popen(
            [pyweft, "serve", "benchapp:engine", "--port", str(port)],
            cwd=tmp,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            asyncio.run(measure(f"http://127.0.0.1:{port}", proc, args))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        (tmp / "bareapp.py").write_text(textwrap.dedent(BARE))
        port = free_port()
        bare = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "bareapp:app", "--port", str(port)],
            cwd=tmp,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            asyncio.run(ceiling(f"http://127.0.0.1:{port}", bare, args.starts, args.clients))
        finally:
            bare.send_signal(signal.SIGTERM)
            bare.wait(60)


if __name__ == "__main__":
    main()
