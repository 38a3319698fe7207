"""The storage protocol: a small ordered byte key-value store with compare-and-swap.

All engine semantics live above this line, so a new backend only has to
implement five coroutines and declare what it can promise. Keys are ``str``
ordered by their UTF-8 bytes (the engine only builds ASCII keys); values are
opaque ``bytes`` that adapters never inspect.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable


@dataclass(frozen=True, kw_only=True, slots=True)
class Put:
    """Write ``value`` at ``key`` (insert or overwrite)."""

    key: str
    value: bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class Delete:
    """Remove ``key``; deleting an absent key is not an error."""

    key: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Expect:
    """A condition: the raw stored bytes at ``key`` equal ``value`` (``None``: key absent)."""

    key: str
    value: bytes | None


Op = Put | Delete


@dataclass(frozen=True, kw_only=True, slots=True)
class StorageCapabilities:
    """What an adapter promises. The engine trusts these; lying corrupts runs.

    ``persistence``: ``"local"`` (survives process exit on this machine),
    ``"remote"`` (survives on another machine) or ``"ephemeral"`` (lost on close).
    ``durable_commit``: a batch that returned is on stable storage (e.g. SQLite
    ``synchronous=FULL``); ``False`` means it survives a process crash but may
    be lost on power failure.
    """

    persistence: Literal["local", "remote", "ephemeral"]
    atomic_batch: bool = True
    conditional_batch: bool = True
    linearizable: bool = True
    snapshot_scans: bool = True
    durable_commit: bool = True


@runtime_checkable
class Storage(Protocol):
    """An ordered KV store. See the module docstring and the conformance suite."""

    @property
    def capabilities(self) -> StorageCapabilities: ...

    async def get(self, key: str) -> bytes | None:
        """The stored bytes at ``key``, or ``None``."""
        ...

    async def scan(
        self,
        prefix: str,
        *,
        start: str | None = None,
        end: str | None = None,
        limit: int | None = None,
        reverse: bool = False,
    ) -> list[tuple[str, bytes]]:
        """Pairs whose key starts with ``prefix``, in key order (or reverse).

        ``start`` is an inclusive lower bound and ``end`` an exclusive upper
        bound on the full key; both are optional and combine with ``prefix``.
        ``limit`` caps the number of pairs returned (after ordering).
        """
        ...

    async def batch(self, ops: Sequence[Op]) -> None:
        """Apply every op atomically, in order."""
        ...

    async def conditional_batch(self, conditions: Sequence[Expect], ops: Sequence[Op]) -> bool:
        """Apply ``ops`` atomically iff every condition holds on the raw stored bytes.

        Returns ``False`` only when a condition does not hold (nothing is
        written). Contention, I/O and connection failures raise
        :class:`~pyweft.errors.StorageError`; they are never reported as ``False``.
        """
        ...

    async def close(self) -> None:
        """Release resources. Idempotent. Later calls raise ``StorageClosedError``."""
        ...


class CountingStorage(Storage, Protocol):
    """Optional extension: count keys under a prefix without reading them.

    Aggregates use it when an adapter has it and fall back to a scan otherwise.
    """

    async def count(self, prefix: str) -> int: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class Get:
    """A read of one key, for :func:`read_many`."""

    key: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Scan:
    """A range read, for :func:`read_many`; the fields mean what ``Storage.scan``'s do."""

    prefix: str
    start: str | None = None
    end: str | None = None
    limit: int | None = None
    reverse: bool = False


Read = Get | Scan
ReadResult = bytes | None | list[tuple[str, bytes]]


class MultiReadStorage(Storage, Protocol):
    """Optional extension: serve several reads in one trip to the store.

    ``read_many(reads)`` returns, in order, what ``get`` (for a :class:`Get`) or
    ``scan`` (for a :class:`Scan`) would have returned, with their errors. Each
    read sees the store as a read of its own would; no snapshot is shared between
    them. The engine uses it where one step needs several reads at once (a signal
    send, loading a run), to pay one hand-off to the store instead of several.
    """

    async def read_many(self, reads: Sequence[Read]) -> list[ReadResult]: ...


async def read_many(storage: Storage, reads: Sequence[Read]) -> list[ReadResult]:
    """``reads`` in one trip where the adapter can (:class:`MultiReadStorage`), else one
    after another through ``get`` and ``scan`` (so wrappers that inject faults or count
    calls see each read)."""
    many = getattr(storage, "read_many", None)
    if many is not None:
        results: list[ReadResult] = await many(reads)
        return results
    out: list[ReadResult] = []
    for read in reads:
        if isinstance(read, Get):
            out.append(await storage.get(read.key))
        else:
            out.append(
                await storage.scan(
                    read.prefix,
                    start=read.start,
                    end=read.end,
                    limit=read.limit,
                    reverse=read.reverse,
                )
            )
    return out


Unlisten = Callable[[], Awaitable[None]]

TakePlan = Callable[
    [list[tuple[str, bytes]], list[bytes | None]], Sequence[tuple[Sequence[Expect], Sequence[Op]]]
]
"""What a :meth:`TakingStorage.take` writes, decided from the pairs it took and the keys it
peeked at: conditional batches."""


class TakingStorage(Storage, Protocol):
    """Optional extension: take entries from an ordered range without racing other takers.

    ``take(prefix, start=..., limit=n, plan=f, peek=keys)`` reads up to ``n`` pairs
    under ``prefix`` (from ``start``, key order), skipping pairs that another ``take``
    holds at that moment (it does not wait for them), and the values at ``peek``
    (``None``: absent; read, not held: a key under ``prefix`` that every taker must see,
    such as a queue's settings, belongs outside ``start`` and in ``peek``); calls
    ``f(pairs, peeked)``, which must not do I/O, for the conditional batches to write
    (they should write only the pairs taken and keys outside ``prefix``); applies each
    of them as
    ``conditional_batch`` would, its conditions checked on the stored bytes at
    that point; and returns each batch's outcome in order. No other ``take`` reads
    the pairs this one read until it has returned. A batch can also come back
    ``False`` when another writer holds one of its keys at that moment (no waiting,
    so no take ever deadlocks with a writer); nothing of it is written then.
    Workers use it to claim several tasks in one trip with no lost races
    (PostgreSQL: ``FOR UPDATE SKIP LOCKED``). Stores without it are used through
    ``scan`` and ``conditional_batch``, which is equally correct, but racing
    claimers then waste writes on each other.
    """

    async def take(
        self,
        prefix: str,
        *,
        start: str | None = None,
        limit: int,
        plan: TakePlan,
        peek: Sequence[str] = (),
    ) -> list[bool]: ...


class NotifyingStorage(Storage, Protocol):
    """Optional extension: let every process sharing the store know that something changed.

    ``notify(topic)`` reaches each ``listen(topic, callback)`` on the same store,
    in this process or another, after the caller's earlier writes committed.
    Best effort: a notification can be lost (a dropped connection), so a
    listener must also look for itself now and then; a listener whose
    connection was restored is called once, since it may have missed some.
    ``callback`` runs on the event loop that called ``listen`` and must not
    block. The engine uses it to deliver cross-process signals, updates and
    queries at once instead of at its next poll.
    """

    async def notify(self, topic: str) -> None: ...

    async def listen(self, topic: str, callback: Callable[[], None]) -> Unlisten:
        """Call ``callback`` on each notification of ``topic``; await the result to stop."""
        ...


COMMIT_RINGS: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "pyweft_commit_rings", default=()
)
"""Topics to notify with the write being made in this context (see :func:`ringing`)."""


@contextlib.contextmanager
def ringing(topics: Sequence[str]) -> Iterator[None]:
    """Notify ``topics`` in the transaction of the one write made inside this block.

    Only on a store whose ``notifies_on_commit`` is true (PostgreSQL: ``pg_notify`` in
    the group commit): listeners hear of the write once it committed, and never of one
    that failed, with no trip of its own; a batch whose conditions failed may still
    notify (a listener looks and finds nothing new). It is a context, not a parameter,
    so that stores wrapped by others (fault injection, tests) still see it: a wrapper
    that hands the write on in the same task hands the rings on with it. Elsewhere the
    caller rings after the write (``notify`` or a doorbell).
    """
    token = COMMIT_RINGS.set(tuple(topics))
    try:
        yield
    finally:
        COMMIT_RINGS.reset(token)


def notifies_on_commit(storage: object) -> bool:
    """The store honours :func:`ringing`."""
    return getattr(storage, "notifies_on_commit", False) is True


def prefix_end(prefix: str) -> str | None:
    """The smallest string greater than every string starting with ``prefix``.

    ``None`` when no such bound exists (empty prefix or all code points maximal).
    Surrogates are skipped because they have no UTF-8 encoding, so a bound
    containing one could not be handed to a byte-ordered database.
    """
    if prefix and ord(prefix[-1]) < 0xD7FF:  # the common case: bump the last character
        return prefix[:-1] + chr(ord(prefix[-1]) + 1)
    chars = list(prefix)
    while chars:
        last = ord(chars[-1])
        if last < 0x10FFFF:
            nxt = last + 1
            if 0xD800 <= nxt <= 0xDFFF:
                nxt = 0xE000
            chars[-1] = chr(nxt)
            return "".join(chars)
        chars.pop()
    return None
