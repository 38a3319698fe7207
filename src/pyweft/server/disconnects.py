"""Long waits that end when their HTTP client leaves.

A long poll (``GET .../result?wait=30``, ``workflow_result`` over MCP...) holds a
server task and an engine waiter for as long as it waits. A client that drops its
connection will never read the answer, so the wait is cancelled as soon as the ASGI
server reports ``http.disconnect`` on the request's ``receive`` channel. Only the
caller's wait is cancelled: the engine calls used here are pure reads and waits, so
the run itself goes on untouched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from starlette.types import Receive

T = TypeVar("T")

CLIENT_GONE_STATUS = 499
"""The status recorded (and sent, into a closed connection) for a wait whose client
left: the "client closed request" code that nginx made common."""


class ClientGone(Exception):
    """The client closed its connection while its request waited; no one reads an answer."""


async def until_disconnected(receive: Receive) -> None:
    """Return once the ASGI server reports that the client disconnected.

    Body messages still arriving are skipped: call this only when nobody else reads
    ``receive`` any more (the request body has been read, or is of no interest).
    """
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(receive: Receive, wait: Awaitable[T]) -> T:
    """``await wait``, cancelled as soon as the client disconnects (then ``ClientGone``).

    The wait runs as its own task next to a watcher of ``receive``; whichever ends
    first ends the other. An answer ready at the same moment as the disconnect wins.
    Exceptions of ``wait`` propagate unchanged. The request's body must have been read
    already (the watcher consumes ``receive``).
    """
    waiting = asyncio.ensure_future(wait)
    watching = asyncio.ensure_future(until_disconnected(receive))
    try:
        await asyncio.wait((waiting, watching), return_when=asyncio.FIRST_COMPLETED)
    finally:
        # Also on our own cancellation (server shutdown): neither task outlives the call.
        for task in (waiting, watching):
            task.cancel()
        await asyncio.wait((waiting, watching))
    if not waiting.cancelled():
        return waiting.result()  # done: its answer, or its exception
    failed = None if watching.cancelled() else watching.exception()
    if failed is not None:  # the channel itself broke: say so, not a disconnect
        raise failed
    raise ClientGone
