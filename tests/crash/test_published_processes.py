"""Published events and streams read from another process while they are written, with
the writer SIGKILLed mid-stream and restarted: every chunk is read once, in order.

The writer is ``published_worker.py`` (an engine driving one ``streamer`` run); the
reader is this test's client engine, so the only way a chunk reaches it is through
the store (PostgreSQL: LISTEN/NOTIFY; SQLite: the readers' short poll).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyweft import Engine
from support.backends import postgres_schema, with_schema
from support.poll import eventually

WORKER = Path(__file__).resolve().parent / "published_worker.py"
CHUNKS = 200


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'pyweft.db'}"
    else:
        with postgres_schema() as (url, schema):
            yield with_schema(url, schema)


def _launch(store: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, str(WORKER), store, "s", str(CHUNKS)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


async def test_reader_in_another_process_sees_every_chunk_once_across_a_sigkill(
    store: str, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    first = _launch(store, log)
    try:
        async with Engine(store, role="client", poll_interval=0.05) as reader:
            await eventually(
                lambda: b"START" in log.read_bytes() or first.poll() is not None,
                timeout=30,
                what="the writer to start",
            )
            assert first.poll() is None, log.read_text()
            got: list[int] = []
            killed = False
            second: subprocess.Popen[bytes] | None = None
            progress = await reader.get_event("s", "progress", timeout=30)
            assert isinstance(progress, int)
            async for chunk in reader.read_stream("s", "out"):
                got.append(chunk)
                if len(got) == 30 and not killed:
                    killed = first.poll() is None
                    first.send_signal(signal.SIGKILL)
                    first.wait()
                    second = _launch(store, log)
            assert got == list(range(CHUNKS)), log.read_text()
            assert await reader.get_event("s", "done", timeout=30) == CHUNKS
            assert second is not None
            assert await asyncio.to_thread(second.wait, 60) == 0, log.read_text()
            steps = [s.kind for s in await reader.get_handle("s").history()]
            assert steps.count("stream") == CHUNKS and steps.count("stream_close") == 1
    finally:
        for proc in (first,):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
