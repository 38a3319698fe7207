"""The remote workers guide, run as written: its app served by ``pyweft serve --auth
keys``, its Python worker and its Node worker each serving a run, then a SIGTERM that
stops the server cleanly."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from pyweft import Engine, MemoryStorage
from support.node import node_or_skip

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "remote-workers.md"
PYWEFT = str(Path(sys.executable).parent / "pyweft")


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", GUIDE.read_text(), re.S | re.M)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_workflow(base: str, key: str, image: str) -> object:
    headers = {"Authorization": f"Bearer {key}"}
    started = httpx.post(
        f"{base}/api/v1/workflows", json={"type": "thumbnail", "args": [image]}, headers=headers
    )
    assert started.status_code == 201, started.text
    run_id = started.json()["id"]
    done = httpx.get(
        f"{base}/api/v1/workflows/{run_id}/result?wait=30", headers=headers, timeout=40
    )
    assert done.status_code == 200, done.text
    return done.json()["result"]


def start(args: list[str], cwd: Path, env: dict[str, str], log: str) -> subprocess.Popen[bytes]:
    with open(cwd / log, "wb") as out:
        return subprocess.Popen(
            args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )


def stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


def create_key(cwd: Path, env: dict[str, str], *scopes: str) -> str:
    args = [PYWEFT, "keys", "create", "--db", "sqlite:///media.db", "--subject", "guide"]
    for scope in scopes:
        args += ["--scope", scope]
    done = subprocess.run(
        [*args, "--json"], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["key"])


def test_the_guide_s_app_and_both_workers_run_as_written(tmp_path: Path) -> None:
    node = node_or_skip()
    app, worker_py, tuning = blocks("python")
    namespace: dict[str, object] = {}
    exec(tuning, namespace)  # the tuning example builds its app as written
    built = namespace["build"](Engine(MemoryStorage()))  # type: ignore[operator]
    assert built.state.pyweft_tasks.options.reconnect_grace_s == 5.0
    (worker_js,) = blocks("js")
    port = free_port()
    (tmp_path / "app.py").write_text(app)
    (tmp_path / "worker.py").write_text(worker_py.replace("7233", str(port)))
    (tmp_path / "worker.mjs").write_text(worker_js.replace("7233", str(port)))
    shutil.copy(ROOT / "examples" / "node-worker" / "pyweft-worker.mjs", tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYWEFT_")}
    env["PYTHONPATH"] = str(tmp_path)
    base = f"http://127.0.0.1:{port}"
    server = start(
        [PYWEFT, "serve", "app:engine", "--auth", "keys", "--port", str(port), "--no-dashboard"],
        tmp_path,
        env,
        "serve.log",
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(base + "/api/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.05)
        worker_key = create_key(tmp_path, env, "workers:write")
        client_key = create_key(tmp_path, env, "workflows:write", "workflows:read")
        wenv = {**env, "PYWEFT_TOKEN": worker_key}
        py = start([sys.executable, "worker.py"], tmp_path, wenv, "py.log")
        try:
            assert run_workflow(base, client_key, "cat.png") == "cat.png@320"
        finally:
            assert stop(py) == 0, (tmp_path / "py.log").read_text()
        js = start([node, "--experimental-websocket", "worker.mjs"], tmp_path, wenv, "js.log")
        try:
            assert run_workflow(base, client_key, "dog.png") == "dog.png@320"
        finally:
            assert stop(js) == 0, (tmp_path / "js.log").read_text()
    finally:
        assert stop(server) == 0, (tmp_path / "serve.log").read_text()
