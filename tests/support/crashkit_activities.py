"""Shared pieces of the activity crash tests (``tests/crash/*_heartbeats``, ``*_async_completion``):
start ``tests/crash/activity_worker.py`` with a JSON config and read its ledger."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WORKER = Path(__file__).resolve().parents[1] / "crash" / "activity_worker.py"


@dataclass(frozen=True, slots=True)
class Line:
    kind: str
    lifetime: str
    at: float
    what: str
    attempt: int
    data: Any


def read_lines(ledger: Path) -> list[Line]:
    if not ledger.exists():
        return []
    out = []
    for raw in ledger.read_text().splitlines():
        kind, lifetime, at, what, attempt, data = raw.split(" ", 5)
        out.append(Line(kind, lifetime, float(at), what, int(attempt), json.loads(data)))
    return out


def launch(tmp: Path, cfg: dict[str, Any]) -> subprocess.Popen[bytes]:
    with open(tmp / f"worker-{cfg['lifetime']}.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, str(WORKER), json.dumps(cfg)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(os.environ),
        )


def log_tail(tmp: Path, lifetime: str) -> str:
    path = tmp / f"worker-{lifetime}.log"
    return "\n".join(path.read_text(errors="replace").splitlines()[-40:]) if path.exists() else ""
