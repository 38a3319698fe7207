"""`pyweft serve` as a real uvicorn process: keys, auth, and a graceful SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

PYWEFT = str(Path(sys.executable).parent / "pyweft")

APP = textwrap.dedent(
    """
    from pyweft import Engine, WorkflowContext, activity, workflow

    @activity
    async def add_one(x: int) -> int:
        return x + 1

    @workflow
    async def add_three(ctx: WorkflowContext, x: int) -> int:
        for _ in range(3):
            try:
                x = await ctx.run(add_one, x)
            except Exception:
                raise
        return x

    engine = Engine("sqlite:///{db}", workflows=[add_three])
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_up(url: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        try:
            if httpx.get(url + "/api/v1/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise AssertionError("server did not come up")


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "servedapp.py").write_text(APP.replace("{db}", str(tmp_path / "app.db")))
    return tmp_path


def spawn(app_dir: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYWEFT_")}
    return subprocess.Popen(
        [PYWEFT, "serve", "servedapp:engine", *args],
        cwd=app_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_served_engine_requires_a_key_and_drains_on_sigterm(app_dir: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = spawn(app_dir, "--port", str(port), "--auth", "keys")
    try:
        wait_up(url, proc)
        db = f"sqlite:///{app_dir / 'app.db'}"
        created = subprocess.run(
            [PYWEFT, "keys", "create", "--db", db, "--subject", "ci", "--scope",
             "workflows:write", "--scope", "workflows:read", "--json"],
            capture_output=True, check=True, cwd=app_dir,
        )  # fmt: skip
        import json

        token = json.loads(created.stdout)["key"]
        assert httpx.post(f"{url}/api/v1/workflows", json={"type": "add_three"}).status_code == 401
        headers = {"Authorization": f"Bearer {token}"}
        resp = httpx.post(
            f"{url}/api/v1/workflows", json={"type": "add_three", "args": [1]}, headers=headers
        )
        assert resp.status_code == 201
        run_id = resp.json()["id"]
        result = httpx.get(
            f"{url}/api/v1/workflows/{run_id}/result", params={"wait": 20}, headers=headers,
            timeout=30,
        )  # fmt: skip
        assert result.json()["result"] == 4
        key_id = token.split("_")[1]
        subprocess.run([PYWEFT, "keys", "revoke", key_id, "--db", db], check=True, cwd=app_dir)
        resp = httpx.get(f"{url}/api/v1/workflows", headers=headers)
        assert resp.status_code == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    assert token not in err.decode()


def test_non_loopback_bind_without_auth_is_refused(app_dir: Path) -> None:
    proc = spawn(app_dir, "--host", "0.0.0.0", "--port", str(free_port()))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "ConfigurationError" in err.decode() and "without authentication" in err.decode()


def test_sigterm_ends_open_event_feeds_and_exits_cleanly(app_dir: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # A grace period far longer than the read timeout: only ending the feed lets it finish.
    proc = spawn(app_dir, "--port", str(port), "--graceful-timeout", "600")
    try:
        wait_up(url, proc)
        with httpx.stream("GET", f"{url}/api/v1/events/sse", timeout=120) as resp:
            lines = resp.iter_lines()
            assert next(lines) == ": connected"
            proc.send_signal(signal.SIGTERM)
            rest = list(lines)  # returns once the server ends the feed
        assert all(line.startswith(":") or line == "" for line in rest)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    assert "Application shutdown complete" in err.decode()


@pytest.mark.parametrize("flag", [None, "--no-access-log"])
def test_the_access_log_is_on_unless_turned_off(app_dir: Path, flag: str | None) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = spawn(app_dir, "--port", str(port), *([flag] if flag else []))
    try:
        wait_up(url, proc)
        assert httpx.get(f"{url}/api/v1/workflows").status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    logged = '"GET /api/v1/workflows HTTP/1.1" 200' in out.decode()  # uvicorn: stdout
    assert logged == (flag is None), out.decode()
