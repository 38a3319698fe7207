"""Wait for a condition with a deadline instead of sleeping a fixed time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def eventually(
    check: Callable[[], bool | Awaitable[bool]], *, timeout: float = 5.0, what: str = "condition"
) -> None:
    """Poll ``check`` (sync or async) until it is true, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.002)
