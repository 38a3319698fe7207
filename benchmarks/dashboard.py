"""The dashboard's speed targets (issue 18), in a real headless Chromium.

    .venv/bin/python benchmarks/dashboard.py [--runs 100000] [--steps 1000] [--samples 10]

Seeds a fresh SQLite store with ``--runs`` finished runs, one run of ``--steps``
activities and one run that waits for signals, serves it with ``pyweft serve``, and
measures, with the page already loaded (navigation inside the app, as a user clicks):

* the runs page: from the click to the first page of rows on screen (the API call
  ``GET /workflows?limit=50`` is also timed alone, from this process);
* the run page of the ``--steps`` run: from the click to every timeline row rendered;
* live updates: from sending a signal (an HTTP call from this process) to the new step
  appearing in the open run page's timeline, and from starting a run to its row
  appearing on the runs page. Both clocks are this machine's wall clock.

Needs chromium and chromedriver (Debian: ``apt-get install chromium chromium-driver``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from pyweft import Engine, WorkflowContext, activity, workflow

ROOT = Path(__file__).resolve().parents[1]


@workflow
async def noop(ctx: WorkflowContext, n: int) -> int:
    return n


@activity
async def step(i: int) -> int:
    return i


@workflow
async def long(ctx: WorkflowContext, count: int) -> int:
    total = 0
    for i in range(count):
        total += await ctx.run(step, i)
    return total


@workflow
async def listener(ctx: WorkflowContext) -> None:
    while True:
        await ctx.wait_for_signal("ping")


WORKFLOWS = [noop, long, listener]


def engine() -> Engine:  # for `pyweft serve benchmarks.dashboard:engine`
    return Engine(os.environ["PYWEFT_BENCH_DB"], workflows=WORKFLOWS)


async def seed(url: str, runs: int, steps: int) -> None:
    async with Engine(url, workflows=WORKFLOWS) as eng:
        started = time.perf_counter()
        for base in range(0, runs, 2000):
            handles = await asyncio.gather(
                *(
                    eng.start(noop, i, id=f"run-{i:06d}")
                    for i in range(base, min(base + 2000, runs))
                )
            )
            await asyncio.gather(*(h.result() for h in handles))
        print(f"seeded {runs:,} runs in {time.perf_counter() - started:.1f}s", flush=True)
        await (await eng.start(long, steps, id="long")).result(timeout=120)
        await eng.start(listener, id="listener")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def show(name: str, values: list[float], target: str) -> None:
    print(
        f"{name}: p50 {statistics.median(values):.0f} ms, p90 {pct(values, 0.9):.0f} ms, "
        f"max {max(values):.0f} ms (n={len(values)}; target {target})",
        flush=True,
    )


# From a hash change to `selector` matching at least `count` elements: in-page time.
NAVIGATE = """
const [hash, selector, count, done] = arguments;
const t0 = performance.now();
location.hash = hash;
(function poll() {
  if (document.querySelectorAll(selector).length >= count) done(performance.now() - t0);
  else requestAnimationFrame(poll);
})();
"""
# Wall-clock time when `selector` first matches `count` elements (polled each frame).
WATCH = """
const [selector, count, done] = arguments;
(function poll() {
  if (document.querySelectorAll(selector).length >= count) done(Date.now());
  else requestAnimationFrame(poll);
})();
"""


def browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = shutil.which("chromium") or "chromium"
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,800",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(
        service=Service(shutil.which("chromedriver") or "chromedriver"), options=options
    )
    driver.set_script_timeout(60)
    return driver


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument(
        "--store", help="SQLite file to seed once and reuse on later runs (default: a fresh temp)"
    )
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pyweft-dash-bench-") as tmp:
        path = Path(opts.store) if opts.store else Path(tmp) / "bench.db"
        db = f"sqlite:///{path}"
        if not path.exists():
            asyncio.run(seed(db, opts.runs, opts.steps))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYWEFT_")}
        env["PYWEFT_BENCH_DB"] = db
        pyweft = str(Path(sys.executable).parent / "pyweft")
        server = subprocess.Popen(
            [pyweft, "serve", "benchmarks.dashboard:engine", "--port", str(port)],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            while True:
                try:
                    if httpx.get(url + "/api/v1/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            measure(url, opts)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)


def measure(url: str, opts: argparse.Namespace) -> None:
    api = httpx.Client(base_url=url + "/api/v1")
    api_times = []
    for _ in range(opts.samples * 2):
        t0 = time.perf_counter()
        assert len(api.get("/workflows", params={"limit": 50}).json()["items"]) == 50
        api_times.append((time.perf_counter() - t0) * 1000)
    show(f"GET /workflows?limit=50 with {opts.runs:,} runs (API alone)", api_times, "-")

    d = browser()
    try:
        d.get(url + "/#/system")
        time.sleep(1)
        page, timeline = [], []
        for _ in range(opts.samples):
            d.execute_script("location.hash = '#/system'")
            time.sleep(0.3)
            page.append(d.execute_async_script(NAVIGATE, "#/runs", "#runs-table tbody tr", 50))
            d.execute_script("location.hash = '#/system'")
            time.sleep(0.3)
            timeline.append(
                d.execute_async_script(NAVIGATE, "#/runs/long", "#timeline li", opts.steps)
            )
        show("runs page: click to first page of rows on screen", page, "<= 300 ms")
        show(f"run page: click to a {opts.steps}-step timeline rendered", timeline, "<= 1000 ms")

        signal_lag = []
        d.execute_script("location.hash = '#/runs/listener'")
        time.sleep(1.5)
        for i in range(opts.samples):
            d.execute_script(
                "window.__seen = null; const [sel, n] = arguments; (function p() {"
                " if (document.querySelectorAll(sel).length >= n) window.__seen = Date.now();"
                " else requestAnimationFrame(p); })();",
                "#timeline li",
                i + 1,
            )
            sent = time.time() * 1000
            api.post("/workflows/listener/signal/ping", json={"payload": i})
            seen = wait_for(d, "return window.__seen")
            signal_lag.append(seen - sent)
            time.sleep(0.2)
        show("live: signal sent to its step on the open run page", signal_lag, "<= 1000 ms")

        start_lag = []
        d.execute_script("location.hash = '#/runs'")
        time.sleep(1.5)
        for i in range(opts.samples):
            run_id = f"zz-live-{i}"  # ids sort after run-…; the list is newest first anyway
            d.execute_script(
                "window.__seen = null; const sel = arguments[0]; (function p() {"
                " if (document.querySelector(sel)) window.__seen = Date.now();"
                " else requestAnimationFrame(p); })();",
                f'#runs-table tr[data-id="{run_id}"]',
            )
            sent = time.time() * 1000
            api.post("/workflows", json={"type": "noop", "args": [i], "id": run_id})
            seen = wait_for(d, "return window.__seen")
            start_lag.append(seen - sent)
            time.sleep(0.2)
        show("live: run started to its row on the runs page", start_lag, "<= 1000 ms")
    finally:
        d.quit()


def wait_for(d: Any, script: str, timeout: float = 10.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = d.execute_script(script)
        if value:
            return float(value)
        time.sleep(0.01)
    raise TimeoutError(script)


if __name__ == "__main__":
    main()
