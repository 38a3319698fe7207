"""``pyweft.sync.Worker``: a task-queue worker for code that does not run an event loop.

It runs :class:`pyweft.Worker` on a background thread with its own loop::

    with pyweft.sync.Worker("sqlite:///app.db", activities=[resize], queues=["media"]):
        ...  # tasks of queue "media" are served until the block ends (then it drains)

or ``pyweft.sync.Worker(...).run()`` to serve until SIGTERM/SIGINT.
"""

from __future__ import annotations

import signal
import threading
from types import TracebackType
from typing import Any

from pyweft.definitions import Duration
from pyweft.sync.loop import LoopThread
from pyweft.worker.worker import Worker as AsyncWorker


class Worker:
    """The blocking form of :class:`pyweft.Worker`; it takes the same arguments."""

    def __init__(self, storage: Any = None, **options: Any) -> None:
        self._loop = LoopThread("pyweft-sync-worker")
        try:
            self.async_worker: AsyncWorker = self._loop.call(AsyncWorker, storage, **options)
        except BaseException:
            self._loop.stop()
            raise
        self._started = False

    @property
    def id(self) -> str:
        return self.async_worker.id

    def start(self) -> Worker:
        if not self._started:
            self._loop.run(self.async_worker.start)
            self._started = True
        return self

    def stop(self, drain_timeout: Duration | None = None) -> None:
        """Drain and stop (see :meth:`pyweft.Worker.stop`), then end the loop thread."""
        try:
            if self._started:
                self._loop.run(self.async_worker.stop, drain_timeout)
        finally:
            self._started = False
            self._loop.stop()

    def run(self) -> None:
        """Serve until SIGTERM or SIGINT (from the main thread), then drain and stop."""
        self.start()
        done = threading.Event()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: done.set())
        try:
            while not done.wait(0.25):
                pass
        finally:
            self.stop()

    def __enter__(self) -> Worker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
