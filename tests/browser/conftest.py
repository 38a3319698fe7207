"""A real ``pyweft serve`` process with API keys on a seeded SQLite store, and headless
Chromium driven by Selenium. Marked slow; CI runs it in its own step after installing
Debian's ``chromium`` and ``chromium-driver``. Without them (or selenium) the tests skip
with the reason, unless ``PYWEFT_REQUIRE_BROWSER=1`` makes that a failure.

Screenshots go to ``$PYWEFT_SCREENSHOTS`` (default ``build/dashboard-screenshots``).
A failing test also leaves ``FAILED-<test>.png`` and ``FAILED-<test>.txt`` there (the
page's text, its console, and the tail of the server's and the worker's logs), so a
failure seen once on a loaded CI machine can be read afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .kit import ROOT, Page, Served

PYWEFT = str(Path(sys.executable).parent / "pyweft")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

ADMIN_SCOPES = (
    "workflows:read", "workflows:write", "events:read", "signals:write", "updates:write",
    "queries:read", "reviews:read", "reviews:write", "schedules:read", "schedules:write",
    "system:read", "workflows:admin", "workers:write",
)  # fmt: skip
WORKER_ID = "shop-labels-1"
READ_ONLY_SCOPES = ("workflows:read", "events:read", "reviews:read", "schedules:read")


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install selenium)"
    if CHROMIUM is None or CHROMEDRIVER is None:
        return (
            "chromium and chromedriver are not installed (apt-get install chromium chromium-driver)"
        )
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reason = _missing()
    if reason is None:
        return
    if os.environ.get("PYWEFT_REQUIRE_BROWSER", "").strip() not in ("", "0"):
        raise pytest.UsageError(f"PYWEFT_REQUIRE_BROWSER is set but {reason}")
    for item in items:
        if "tests/browser" in str(item.path):
            item.add_marker(pytest.mark.skip(reason=reason))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _key(db: str, subject: str, scopes: tuple[str, ...]) -> str:
    args = [PYWEFT, "keys", "create", "--db", db, "--subject", subject, "--json"]
    for scope in scopes:
        args += ["--scope", scope]
    out = subprocess.run(args, capture_output=True, check=True, cwd=ROOT)
    return str(json.loads(out.stdout)["key"])


def _stamped_copy(proc: subprocess.Popen[bytes], path: Path) -> threading.Thread:
    """Copy the process's output to ``path`` as it comes, each line behind its time."""

    def copy() -> None:
        assert proc.stdout is not None
        with proc.stdout, path.open("wb", buffering=0) as out:
            for line in proc.stdout:
                now = time.time()
                stamp = time.strftime("%H:%M:%S", time.localtime(now)) + f".{now % 1:.3f}"[2:]
                out.write(f"{stamp} ".encode() + line)

    thread = threading.Thread(target=copy, name=f"log {path.name}", daemon=True)
    thread.start()
    return thread


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    from .seed import seed

    db = f"sqlite:///{tmp_path_factory.mktemp('dash') / 'shop.db'}"
    asyncio.run(seed(db))
    admin, reader = _key(db, "operator", ADMIN_SCOPES), _key(db, "viewer", READ_ONLY_SCOPES)
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYWEFT_")}
    env["PYWEFT_DASH_DB"] = db
    # Output goes to files, each line stamped with the time it arrived (read when a test
    # fails): a pipe nobody read until the end would stall the process once it filled.
    logs = tmp_path_factory.mktemp("logs")
    serve_log, worker_log = logs / "serve.log", logs / "worker.log"
    proc = subprocess.Popen(
        [PYWEFT, "serve", "tests.browser.shop:engine", "--port", str(port), "--auth", "keys"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    copiers = [_stamped_copy(proc, serve_log)]
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, serve_log.read_text(errors="replace")
        try:
            if httpx.get(url + "/api/v1/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "pyweft serve did not come up"
        time.sleep(0.05)
    # A real worker process on the same store, for the workers page (drain and resume).
    worker = subprocess.Popen(
        [PYWEFT, "worker", "tests.browser.shop", "--db", db, "--queue", "labels",
         "--id", WORKER_ID, "--concurrency", "4", "--drain-timeout", "2"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    copiers.append(_stamped_copy(worker, worker_log))
    served = Served(url=url, db=db, admin_key=admin, read_key=reader, logs=(serve_log, worker_log))
    try:
        while not any(w["id"] == WORKER_ID for w in served.api("GET", "/workers").json()["items"]):
            assert worker.poll() is None, worker_log.read_text(errors="replace")
            assert time.monotonic() < deadline + 30, "pyweft worker did not come up"
            time.sleep(0.05)
        yield served
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        for copier in copiers:
            copier.join(timeout=10)
        assert worker.returncode == 0, worker_log.read_text(errors="replace")
        assert proc.returncode == 0, serve_log.read_text(errors="replace")


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,800",
        "--disable-gpu",
    ):
        options.add_argument(arg)  # fmt: skip
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    drv.implicitly_wait(0)
    try:
        yield drv
    finally:
        drv.quit()


_CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call" and report.failed:
        item.stash[_CALL_FAILED] = True
    return report


@pytest.fixture
def page(request: pytest.FixtureRequest, driver: Any, served: Served) -> Iterator[Page]:
    driver.set_window_size(1280, 800)
    driver.get_log("browser")  # start each test with an empty console
    page = Page(driver, served)
    yield page
    if request.node.stash.get(_CALL_FAILED, False):
        name = request.node.name.replace("/", "_")
        # Shown under the failure's "Captured stderr teardown", and kept under SHOTS.
        print(page.failure_report(name), file=sys.stderr)
