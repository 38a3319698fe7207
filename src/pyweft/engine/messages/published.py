"""Published events: values a run sets (``ctx.set_event``) and others wait for
(``engine.get_event``).

An event is one key per (run, name) holding the latest value, written in the
same commit as the step that records the write: on replay the recorded step
returns at once and nothing is written again, so each ``set_event`` lands
exactly once however often the run is replayed. Last write wins.

Key layout (all under ``pub:{workflow}:`` so purge removes them with one scan):
``pub:{wf}:e:{key}`` the event value; ``pub:{wf}:s:{key}:{offset}`` stream
chunks and ``pub:{wf}:m:{key}`` a stream's head (see ``streams.py``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from pyweft.engine.messages.published_hub import hub_for
from pyweft.engine.replay import keys, records
from pyweft.engine.replay.operations import operation
from pyweft.engine.replay.records import StepRecord
from pyweft.engine.visibility.reader import not_found
from pyweft.errors import InvalidArgumentError
from pyweft.storage.base import Get, Put, read_many

if TYPE_CHECKING:
    from pyweft.codec import PayloadCodec
    from pyweft.engine.replay.run import Run
    from pyweft.storage.base import Storage

MAX_KEY_BYTES = 200


def check_key(key: object, what: str = "event key") -> str:
    return keys.check_text(key, what, MAX_KEY_BYTES)


def prefix(workflow_id: str) -> str:
    """Every published key of one run (what purge deletes)."""
    return f"pub:{keys.enc(workflow_id)}:"


def event_key(workflow_id: str, key: str) -> str:
    return f"{prefix(workflow_id)}e:{keys.enc(key)}"


@operation
async def set_event(run: Run, step: int, key: str, value: Any) -> None:
    """Record ``value`` as the run's event ``key``; written with the step's record."""
    if run.replay(step, "event", key) is not None:
        return
    await run.enter_live()
    now = run.services.clock.now()
    payload = run.encode_result(value, f"event {key!r}")
    await run.commit_step(
        StepRecord(step=step, kind="event", name=key, ok=True, started_at=now, finished_at=now),
        [Put(key=event_key(run.id, key), value=payload)],
    )
    hub_for(run.services.storage).announce()


async def get_event(
    storage: Storage, codec: PayloadCodec, workflow_id: str, key: str, timeout_s: float
) -> Any:
    """The run's latest value for ``key``, waiting up to ``timeout_s`` for the first.

    ``None`` when the wait ends without one, or at once when the run has finished
    without setting it (nothing could set it any more).
    """
    check_key(key)
    if timeout_s < 0:
        raise InvalidArgumentError(f"timeout must be >= 0 seconds, got {timeout_s}")
    hub = hub_for(storage)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    reads = [Get(key=event_key(workflow_id, key)), Get(key=keys.wf(workflow_id))]
    # The common case (already set, or no wait) needs no listener: look first.
    answer = _answer(codec, workflow_id, await read_many(storage, reads))
    if answer is not _WAIT or timeout_s == 0:
        return None if answer is _WAIT else answer
    async with hub.reading():
        while True:
            seen = hub.seq
            answer = _answer(codec, workflow_id, await read_many(storage, reads))
            remaining = deadline - loop.time()
            if answer is not _WAIT or remaining <= 0:
                return None if answer is _WAIT else answer
            await hub.wait(seen, min(remaining, hub.poll_s()))


_WAIT = object()


def _answer(codec: PayloadCodec, workflow_id: str, found: list[Any]) -> Any:
    """The event's value, ``None`` for a finished run without it, or ``_WAIT``."""
    raw, state_raw = found
    if raw is not None:
        return codec.decode(raw)
    if state_raw is None:
        raise not_found(workflow_id)
    state = records.decode_state(state_raw)
    return None if state.status in records.TERMINAL_STATUSES else _WAIT
