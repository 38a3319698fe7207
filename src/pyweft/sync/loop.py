"""``LoopThread``: one background thread running one event loop, and blocking calls into it.

Every call from another thread goes through here, so the rules live in one
place: no blocking call from the loop's own thread (it would wait for
itself), no call once the loop is stopping, and a caller interrupted by
Ctrl-C cancels the work it was waiting for instead of leaving it behind.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeAlias, TypeVar

from pyweft.errors import EngineClosedError, WorkflowUsageError

P = ParamSpec("P")
T = TypeVar("T")
# What the new thread hands back once its loop runs: the loop, and the future that stops it.
_Started: TypeAlias = (
    "concurrent.futures.Future[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]"
)

# A blocked caller wakes this often, only so that Ctrl-C is noticed promptly: SIGINT
# may be delivered to any thread, and on Windows a lock wait without a timeout cannot
# be interrupted at all. It is not a timeout: the caller goes back to waiting.
_WAIT_SLICE_S = 0.25


# How to do on the loop what a refused blocking call would have done, where it is not
# simply ``await sync_engine.async_engine.<same name>(...)``.
_ASYNC_FORMS = {
    "close": "await sync_engine.async_engine.shutdown()",
    "shutdown": "await sync_engine.async_engine.shutdown()",
    "events": "async for event in sync_engine.async_engine.events(...)",
}


def closed_error(*, forked: bool = False) -> EngineClosedError:
    if forked:
        return EngineClosedError(
            "this engine was created in the parent process and does not run in a forked "
            "child; create the engine in each child (e.g. in gunicorn's post_fork hook, "
            "or without --preload)"
        )
    return EngineClosedError(
        "the engine is not running: use `with pyweft.sync.Engine(...) as engine:` "
        "(or call engine.open()) before calling it; a closed engine cannot be reopened"
    )


class LoopThread:
    """Starts a non-daemon thread whose event loop runs until :meth:`stop`."""

    def __init__(self, name: str) -> None:
        self._lock = threading.Lock()
        self._accepting = True
        self._forked = False
        self.owner: object = None
        """Kept alive while the thread runs: an open engine must not vanish unclosed."""
        started: _Started = concurrent.futures.Future()
        # Not a daemon: a daemon thread would be killed mid-write at interpreter exit.
        # The exit hook in ``pyweft.sync.process`` stops it before Python joins it.
        self._thread = threading.Thread(target=self._main, args=(started,), name=name)
        self._thread.start()
        self._loop, self._stop = started.result()

    @property
    def accepting(self) -> bool:
        """False once :meth:`stop` was called or the loop died."""
        return self._accepting

    def in_loop_thread(self) -> bool:
        return threading.get_ident() == self._thread.ident

    def refuse_loop_thread(self, what: str) -> None:
        """Raise instead of blocking the loop's own thread, which would wait forever."""
        if self.in_loop_thread():
            instead = _ASYNC_FORMS.get(what, f"await sync_engine.async_engine.{what}(...)")
            raise WorkflowUsageError(
                f"pyweft.sync.Engine.{what}() was called on the engine's own event loop "
                "(from a workflow, an async activity or a callback); blocking there would "
                f"deadlock. Use the async Engine there instead: `{instead}`."
            )

    # --- calls ----------------------------------------------------------------------

    def run(
        self, fn: Callable[P, Coroutine[Any, Any, T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Run ``fn(*args, **kwargs)`` on the loop and block until it finishes."""
        self.refuse_loop_thread(getattr(fn, "__name__", "call"))
        return self.wait(self.submit(fn(*args, **kwargs)))

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a plain function on the loop thread (directly when already there or stopped).

        For the facade's in-memory reads and registrations: running them on the loop
        keeps them from racing the engine; they never wait, so the loop thread may call
        them too.
        """
        if self.in_loop_thread():
            return fn(*args, **kwargs)
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def invoke() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:
                future.set_exception(exc)

        with self._lock:
            scheduled = self._accepting
            if scheduled:
                self._loop.call_soon_threadsafe(invoke)
        if not scheduled:
            return fn(*args, **kwargs)  # the loop is stopping: nothing else runs there any more
        return self.wait(future)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; raises :class:`EngineClosedError` once stopping."""
        with self._lock:
            if self._accepting:
                try:
                    return asyncio.run_coroutine_threadsafe(coro, self._loop)
                except RuntimeError:  # the loop died under us (see _main)
                    pass
        coro.close()  # never awaited; close it so Python does not warn about it
        raise closed_error(forked=self._forked)

    def wait(self, future: concurrent.futures.Future[T], *, cancel_on_interrupt: bool = True) -> T:
        """Block until ``future`` is done and return its outcome, exceptions unchanged.

        If the wait itself is interrupted (KeyboardInterrupt, SystemExit from a signal
        handler), the work is cancelled too, as asyncio would cancel the awaiting task,
        unless ``cancel_on_interrupt`` is false. Work cancelled because the loop stopped
        raises :class:`EngineClosedError`.
        """
        done = threading.Event()
        future.add_done_callback(lambda _: done.set())
        try:
            while not done.wait(_WAIT_SLICE_S):
                pass
        except BaseException:
            if cancel_on_interrupt:
                future.cancel()
            raise
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            if not self._accepting:
                raise EngineClosedError(
                    "the engine was closed while this call was waiting for it"
                ) from None
            raise

    # --- lifecycle ------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the loop after what is scheduled, then join the thread. Idempotent.

        Work still running on the loop is cancelled, as ``asyncio.run`` does on exit.
        """
        with self._lock:
            if self._accepting:
                self._accepting = False
                with contextlib.suppress(RuntimeError):  # the loop already died and closed
                    self._loop.call_soon_threadsafe(self._set_stop)
        if self.in_loop_thread():
            return  # the thread ends once this callback returns to the loop
        while self._thread.is_alive():
            self._thread.join(_WAIT_SLICE_S)

    def after_fork_in_child(self) -> None:
        """The thread did not survive the fork: refuse calls instead of waiting for it."""
        self._lock = threading.Lock()
        self._accepting = False
        self._forked = True
        self.owner = None

    def _set_stop(self) -> None:
        if not self._stop.done():
            self._stop.set_result(None)

    def _main(self, started: _Started) -> None:
        try:
            # asyncio.run cancels leftover tasks, finalises async generators and joins the
            # default executor before closing the loop: the cleanup a stopped engine needs.
            asyncio.run(self._serve(started))
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
                return
            raise
        finally:
            with self._lock:
                self._accepting = False
            self.owner = None

    async def _serve(self, started: _Started) -> None:
        loop = asyncio.get_running_loop()
        stop: asyncio.Future[None] = loop.create_future()
        started.set_result((loop, stop))
        try:
            await stop
        finally:
            with self._lock:  # also when the loop dies some other way
                self._accepting = False
