"""``unless_disconnected``: a wait against a hand-driven ASGI ``receive`` channel."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pyweft import WorkflowNotFoundError
from pyweft.server.disconnects import ClientGone, unless_disconnected


class Channel:
    """An ASGI ``receive`` the test feeds message by message."""

    def __init__(self, *messages: dict[str, Any]) -> None:
        self.messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        for message in messages:
            self.messages.put_nowait(message)

    async def __call__(self) -> dict[str, Any]:
        return await self.messages.get()

    def disconnect(self) -> None:
        self.messages.put_nowait({"type": "http.disconnect"})


BODY = {"type": "http.request", "body": b"", "more_body": False}


class Wait:
    """A wait the test ends; it records whether it was cancelled."""

    def __init__(self) -> None:
        self.answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.started = asyncio.Event()
        self.cancelled = False

    async def __call__(self) -> str:
        self.started.set()
        try:
            return await self.answer
        except asyncio.CancelledError:
            self.cancelled = True
            raise


def _others() -> set[asyncio.Task[Any]]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()}


async def test_a_wait_that_ends_first_gives_its_answer_and_stops_watching() -> None:
    channel, wait = Channel(BODY), Wait()
    before = _others()
    call = asyncio.ensure_future(unless_disconnected(channel, wait()))
    await wait.started.wait()
    wait.answer.set_result("done")
    assert await call == "done"
    assert _others() == before  # the watcher ended with the call


async def test_a_disconnect_cancels_the_wait_and_raises_client_gone() -> None:
    channel, wait = Channel(BODY), Wait()
    call = asyncio.ensure_future(unless_disconnected(channel, wait()))
    await wait.started.wait()
    channel.disconnect()
    with pytest.raises(ClientGone):
        await call
    assert wait.cancelled


async def test_an_answer_ready_with_the_disconnect_wins() -> None:
    channel, wait = Channel(BODY), Wait()
    call = asyncio.ensure_future(unless_disconnected(channel, wait()))
    await wait.started.wait()
    wait.answer.set_result("done")
    channel.disconnect()
    assert await call == "done"


async def test_the_waits_own_error_goes_through_unchanged() -> None:
    async def missing() -> None:
        raise WorkflowNotFoundError("no run 'x'", workflow_id="x")

    with pytest.raises(WorkflowNotFoundError):
        await unless_disconnected(Channel(BODY), missing())


async def test_cancelling_the_caller_cancels_the_wait_and_the_watcher() -> None:
    channel, wait = Channel(), Wait()
    before = _others()
    call = asyncio.ensure_future(unless_disconnected(channel, wait()))
    await wait.started.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert wait.cancelled
    assert _others() == before


async def test_a_broken_channel_is_reported_not_taken_for_a_disconnect() -> None:
    async def broken() -> dict[str, Any]:
        raise RuntimeError("receive failed")

    wait = Wait()
    with pytest.raises(RuntimeError, match="receive failed"):
        await unless_disconnected(broken, wait())
    assert wait.cancelled or not wait.started.is_set()
