"""Durable ordered streams a run writes (``ctx.stream(key)``) and others follow
(``engine.read_stream``).

Each ``write`` is a step whose record lands in one batch with the chunk
(``pub:{wf}:s:{key}:{offset}``) and the stream's head (``pub:{wf}:m:{key}``,
the next offset and whether the stream is closed). Offsets are 0, 1, 2... in
write order. On replay a recorded write returns at once and writes nothing, so
every chunk is stored exactly once; the head read from the store on the run's
first live write in this process tells it where to continue (after a crash, or
in a later generation of a ``continue_as_new`` run).

A reader scans chunks from its offset, and waits for the hub (see
``published_hub.py``) when it has seen them all. It ends when the stream is
closed and fully read, or when the run has finished and no chunk is left.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Awaitable
from typing import TYPE_CHECKING, Any, cast

import msgspec

from pyweft.engine.messages.published import check_key, prefix
from pyweft.engine.messages.published_hub import hub_for
from pyweft.engine.replay import keys, records
from pyweft.engine.replay.operations import operation
from pyweft.engine.replay.records import StepRecord
from pyweft.engine.replay.run import RACE_BRANCH
from pyweft.engine.visibility.reader import not_found
from pyweft.errors import InvalidArgumentError, WorkflowUsageError
from pyweft.storage.base import Get, Op, Put, Read, Scan, read_many

if TYPE_CHECKING:
    from pyweft.codec import PayloadCodec
    from pyweft.engine.replay.run import Run
    from pyweft.storage.base import Storage

_BATCH = 500


class StreamHead(msgspec.Struct, array_like=True):
    next: int = 0
    closed: bool = False


_head_dec = msgspec.msgpack.Decoder(StreamHead)
_enc = msgspec.msgpack.Encoder()


def head_key(workflow_id: str, key: str) -> str:
    return f"{prefix(workflow_id)}m:{keys.enc(key)}"


def chunks_prefix(workflow_id: str, key: str) -> str:
    return f"{prefix(workflow_id)}s:{keys.enc(key)}:"


def chunk_key(workflow_id: str, key: str, offset: int) -> str:
    return f"{chunks_prefix(workflow_id, key)}{offset:012d}"


class _Heads:
    """The heads of the streams a live run writes, known to this process."""

    def __init__(self) -> None:
        self.heads: dict[str, StreamHead] = {}
        self.lock = asyncio.Lock()


_live: weakref.WeakKeyDictionary[Run, _Heads] = weakref.WeakKeyDictionary()


async def _head(run: Run, key: str) -> StreamHead:
    heads = _live.setdefault(run, _Heads())
    head = heads.heads.get(key)
    if head is None:
        raw = await run.services.storage.get(head_key(run.id, key))
        head = heads.heads[key] = StreamHead() if raw is None else _head_dec.decode(raw)
    return head


@operation
async def write(run: Run, step: int, key: str, chunk: Any, close: bool) -> int | None:
    """Append ``chunk`` (or, with ``close``, close the stream). The chunk's offset."""
    kind = "stream_close" if close else "stream"
    rec = run.replay(step, kind, key)
    if rec is not None:
        return None if rec.value is None else int(run.services.codec.decode(rec.value))
    if RACE_BRANCH.get() is not None:
        # A losing branch's commit is dropped, but offsets would already be taken.
        raise WorkflowUsageError(
            f"stream {key!r}: a stream write cannot be a branch of ctx.race; write before "
            "or after the race"
        )
    await run.enter_live()
    payload = None if close else run.encode_result(chunk, f"chunk of stream {key!r}")
    heads = _live.setdefault(run, _Heads())
    async with heads.lock:  # concurrent writes of one run take offsets one at a time
        head = await _head(run, key)
        if head.closed and not close:
            raise WorkflowUsageError(
                f"stream {key!r} of workflow {run.id!r} is closed; it takes no more chunks"
            )
        offset = head.next
        new = StreamHead(next=offset + (0 if close else 1), closed=True if close else head.closed)
        ops: list[Op] = []
        if new != head:  # closing a closed stream is harmless: a step that writes nothing
            ops.append(Put(key=head_key(run.id, key), value=_enc.encode(new)))
        if payload is not None:
            ops.append(Put(key=chunk_key(run.id, key, offset), value=payload))
        now = run.services.clock.now()
        await run.commit_step(
            StepRecord(
                step=step,
                kind=kind,
                name=key,
                ok=True,
                started_at=now,
                finished_at=now,
                value=None if close else run.services.codec.encode(offset),
            ),
            ops,
        )
        heads.heads[key] = new
    hub_for(run.services.storage).announce()
    return None if close else offset


class StreamWriter:
    """``ctx.stream(key)``: append chunks to one durable stream of this run."""

    __slots__ = ("_key", "_run")

    def __init__(self, run: Run, key: str) -> None:
        self._run = run
        self._key = check_key(key, "stream key")

    @property
    def key(self) -> str:
        return self._key

    def write(self, chunk: Any) -> Awaitable[int]:
        """Append ``chunk`` (any codec value) durably, as one step taken now; the awaitable
        gives its offset (0, 1, ...)."""
        return cast(
            "Awaitable[int]", write(self._run, self._run.alloc_step(), self._key, chunk, False)
        )

    def close(self) -> Awaitable[None]:
        """Close the stream (one step): readers end once they have read every chunk."""
        return cast(
            "Awaitable[None]", write(self._run, self._run.alloc_step(), self._key, None, True)
        )


def read(
    storage: Storage, codec: PayloadCodec, workflow_id: str, key: str, from_offset: int
) -> AsyncIterator[Any]:
    """Chunks from ``from_offset`` on, following the stream live (see module doc)."""
    check_key(key, "stream key")
    if isinstance(from_offset, bool) or not isinstance(from_offset, int) or from_offset < 0:
        raise InvalidArgumentError(f"from_offset must be an int >= 0, got {from_offset!r}")
    return _follow(storage, codec, workflow_id, key, from_offset)


_Look = list[Any]
_Flight = tuple[int, "asyncio.Future[_Look]"]
_looking: weakref.WeakKeyDictionary[Any, dict[tuple[str, str, int], _Flight]] = (
    weakref.WeakKeyDictionary()
)


async def _look(storage: Storage, workflow_id: str, key: str, offset: int, seen: int) -> _Look:
    """Chunks from ``offset``, the head and the run's state, in one read. Readers of one
    stream at the same offset in this process share a read in flight, when it began
    after every wake-up they have seen (``seen``, the hub's sequence): ten readers woken
    by one write cost the store one query, not ten, and none can miss the write."""
    flights = _looking.setdefault(storage, {})
    ident = (workflow_id, key, offset)
    current = flights.get(ident)
    if current is not None and current[0] == seen:
        flight = current[1]
    else:
        start = chunks_prefix(workflow_id, key)
        reads: list[Read] = [
            Scan(prefix=start, start=f"{start}{offset:012d}", limit=_BATCH),
            Get(key=head_key(workflow_id, key)),
            Get(key=keys.wf(workflow_id)),
        ]
        flight = asyncio.ensure_future(read_many(storage, reads))
        flights[ident] = (seen, flight)

        def done(ended: asyncio.Future[_Look]) -> None:
            if not ended.cancelled():
                ended.exception()  # retrieved: every reader that joined it raises it too
            if flights.get(ident, (0, None))[1] is ended:
                del flights[ident]

        flight.add_done_callback(done)
    return await asyncio.shield(flight)


async def _follow(
    storage: Storage, codec: PayloadCodec, workflow_id: str, key: str, offset: int
) -> AsyncIterator[Any]:
    hub = hub_for(storage)
    ended = False
    async with hub.reading():
        while True:
            seen = hub.seq
            rows, head_raw, state_raw = await _look(storage, workflow_id, key, offset, seen)
            assert isinstance(rows, list)
            for _, raw in rows:
                yield codec.decode(raw)
                offset += 1
            if rows:
                ended = False
                continue
            if ended:
                return  # the run had finished and one more look found nothing
            if state_raw is None:
                raise not_found(workflow_id)
            head = None if head_raw is None else _head_dec.decode(head_raw)
            if head is not None and head.closed and offset >= head.next:
                return
            state = records.decode_state(state_raw)
            if state.status in records.TERMINAL_STATUSES:
                # Look once more: the scan may have run before the run's last chunks.
                ended = True
                continue
            await hub.wait(seen, hub.poll_s())
