"""The SQLite adapter's worker threads (storage/sqlite.py): one thread per connection,
fed a queue of jobs that it runs as groups.

Each thread owns its connection (sqlite3 connections are thread-bound) and drains
its queue into one group per pass, so everything queued while it was busy runs
together: the writer's group is one transaction (group commit). Results travel
back with one ``call_soon_threadsafe`` per group and event loop, not one per job,
to keep wake-ups of the loop to a minimum.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future as ThreadFuture
from typing import Any, Generic, TypeVar

from pyweft.errors import StorageClosedError
from pyweft.storage.base import Expect, Op


class Job:
    """A unit of work plus where to deliver its outcome (a result or an exception)."""

    __slots__ = ("future", "loop")

    def __init__(self, future: asyncio.Future[Any] | None, loop: asyncio.AbstractEventLoop | None):
        self.future = future
        self.loop = loop


class WriteJob(Job):
    __slots__ = ("conditions", "ops")

    def __init__(
        self,
        conditions: Sequence[Expect],
        ops: Sequence[Op],
        future: asyncio.Future[Any],
        loop: asyncio.AbstractEventLoop,
    ):
        super().__init__(future, loop)
        self.conditions = conditions
        self.ops = ops


class ReadJob(Job):
    __slots__ = ("params", "single", "sql")

    def __init__(
        self,
        sql: str,
        params: tuple[object, ...],
        single: bool,
        future: asyncio.Future[Any],
        loop: asyncio.AbstractEventLoop,
    ):
        super().__init__(future, loop)
        self.sql = sql
        self.params = params
        self.single = single


class ReadManyJob(ReadJob):
    """Several reads as one statement returning one row: ``shapes`` says, per column,
    ``None`` for a get (the value itself) or a scan's ``reverse`` (its rows as JSON)."""

    __slots__ = ("shapes",)

    def __init__(
        self,
        sql: str,
        params: tuple[object, ...],
        shapes: tuple[bool | None, ...],
        future: asyncio.Future[Any],
        loop: asyncio.AbstractEventLoop,
    ):
        super().__init__(sql, params, True, future, loop)
        self.shapes = shapes


class Stop(Job):
    """Sentinel: finish what is queued before it, close the connection, exit."""

    __slots__ = ()


J = TypeVar("J", bound=Job)


def _settle(pairs: list[tuple[asyncio.Future[Any], object]]) -> None:
    for future, outcome in pairs:
        if future.done():  # the caller was cancelled; nobody is listening
            continue
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


def _deliver(jobs: Sequence[Job], outcomes: Sequence[object]) -> None:
    """Hand outcomes back with one thread-safe call per event loop involved."""
    if len(jobs) == 1:  # the common case of a lone sequential caller
        job = jobs[0]
        if job.loop is not None and job.future is not None:
            with contextlib.suppress(RuntimeError):
                job.loop.call_soon_threadsafe(_settle, [(job.future, outcomes[0])])
        return
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], object]]] = {}
    for job, outcome in zip(jobs, outcomes, strict=True):
        if job.loop is not None and job.future is not None:
            by_loop.setdefault(job.loop, []).append((job.future, outcome))
    for loop, pairs in by_loop.items():
        # A closed loop raises RuntimeError; nobody can be awaiting its futures then.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, pairs)


class Worker(Generic[J]):
    """One thread owning one connection, running whatever is queued as one group.

    The connection is opened on the thread itself (sqlite3 connections are
    thread-bound) and the constructor waits for it, so open errors surface
    at construction time rather than on the first call.
    """

    def __init__(
        self,
        name: str,
        connect: Callable[[], sqlite3.Connection],
        run_group: Callable[[sqlite3.Connection, list[J]], list[object]],
        closed_error: Callable[[], StorageClosedError],
    ) -> None:
        self._connect = connect
        self._run_group = run_group
        self._closed_error = closed_error
        self._queue: queue.SimpleQueue[J | Stop] = queue.SimpleQueue()
        ready: ThreadFuture[None] = ThreadFuture()
        self._thread = threading.Thread(target=self._main, args=(ready,), name=name, daemon=True)
        self._thread.start()
        try:
            ready.result()
        except BaseException:
            self._thread.join()
            raise

    def submit(self, job: J) -> None:
        self._queue.put(job)

    def stop(self, loop: asyncio.AbstractEventLoop | None) -> asyncio.Future[Any] | None:
        future = loop.create_future() if loop is not None else None
        self._queue.put(Stop(future, loop))
        return future

    def join(self) -> None:
        self._thread.join()

    def _main(self, ready: ThreadFuture[None]) -> None:
        try:
            conn = self._connect()
        except BaseException as exc:
            ready.set_exception(exc)
            return
        ready.set_result(None)
        get, get_nowait, empty = self._queue.get, self._queue.get_nowait, self._queue.empty
        run_group = self._run_group
        stop: Stop | None = None
        try:
            while stop is None:
                item = get()
                group: list[J] = []
                while True:  # drain: everything queued meanwhile joins this group
                    if isinstance(item, Stop):
                        stop = item
                        break
                    group.append(item)
                    if empty():  # this thread is the only consumer, so no race
                        break
                    item = get_nowait()
                if group:
                    _deliver(group, run_group(conn, group))
        finally:
            conn.close()
            self._fail_stragglers()
            if stop is not None:
                _deliver([stop], [None])

    def _fail_stragglers(self) -> None:
        # Only reachable if a job raced close() from another thread; fail it loudly.
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if not isinstance(item, Stop):
                _deliver([item], [self._closed_error()])
