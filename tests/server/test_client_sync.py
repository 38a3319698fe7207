"""``pyweft.sync.Client``: the blocking twin, against a real uvicorn server on a thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

import pyweft.sync
from pyweft import AuthenticationError, Engine, MemoryStorage, ServerError, WorkflowNotFoundError
from pyweft.server import ServerAuth
from pyweft.server.keys import ApiKeyStore

from .conftest import WORKFLOWS, add_three, waits_for_go
from .live import live_server


@pytest.fixture
def server() -> Iterator[tuple[str, str]]:
    """A server (with API keys) on its own thread and loop; yields (url, key)."""
    ready: list[tuple[str, str]] = []
    up = threading.Event()
    stop: list[asyncio.Event] = []

    async def main() -> None:
        stop.append(asyncio.Event())
        async with Engine(MemoryStorage(), workflows=WORKFLOWS) as engine:
            _, key = await ApiKeyStore(engine.storage).create(
                subject="t", scopes=["workflows:read", "workflows:write", "signals:write",
                                     "events:read", "updates:write", "queries:read", "streams:read"]
            )  # fmt: skip
            async with live_server(engine, auth=ServerAuth()) as url:
                ready.append((url, key))
                up.set()
                await stop[0].wait()

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(main(),))
    thread.start()
    assert up.wait(30)
    yield ready[0]
    loop.call_soon_threadsafe(stop[0].set)
    thread.join(30)
    loop.close()


def test_sync_client_runs_workflows_and_raises_typed_errors(
    server: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, key = server
    monkeypatch.setenv("PYWEFT_ADDR", url)
    monkeypatch.setenv("PYWEFT_TOKEN", key)
    with pyweft.sync.Client() as client:
        handle = client.start(add_three, 1)
        assert handle.result(timeout=10) == 4
        waiting = client.start(waits_for_go, id="w")
        events = client.events("w")
        assert waiting.update("bump", 2) == 2
        waiting.signal("go", "yes")
        assert waiting.result(timeout=10) == {"go": "yes"}
        kinds = [event.kind for event in events]
        assert kinds[0] == "started" and kinds[-1] == "completed"
        with pytest.raises(WorkflowNotFoundError):
            client.describe("nope")
        assert [i.id for i in client.list(id_prefix="w").items] == ["w"]
    monkeypatch.setenv("PYWEFT_TOKEN", "pwk_0000000000000000_" + "A" * 43)
    with pyweft.sync.Client() as client, pytest.raises(AuthenticationError):
        client.list()


def test_token_can_name_another_variable(
    server: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, key = server
    monkeypatch.setenv("MY_SECRET", key)
    with pyweft.sync.Client(url, token="env:MY_SECRET") as client:
        assert client.list().items == []


def test_unreachable_server_is_a_server_error_after_retries() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    with pyweft.sync.Client(f"http://127.0.0.1:{port}", retries=2, backoff_s=0.001) as client:
        with pytest.raises(ServerError) as caught:
            client.list()
        assert caught.value.status == 0


def test_sync_client_update_with_start_events_streams_and_debounce(
    server: tuple[str, str],
) -> None:
    url, key = server
    with pyweft.sync.Client(url, token=key) as client:
        handle, answer = client.update_with_start(waits_for_go, update=("bump", 5), id="u")
        assert answer == 5
        assert client.get_event("u", "nothing", timeout=0.05) is None
        with client.read_stream("u", "none") as chunks:
            handle.signal("go", 1)
            assert list(chunks) == []  # the run ended without writing it
        first = client.debounce("k", add_three, 1, period="1h")
        assert client.debounce("k", add_three, 2, period="1h").id == first.id
