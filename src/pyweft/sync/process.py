"""What becomes of open sync engines when the process exits or forks.

Exit: each engine's loop thread is a non-daemon thread, and Python joins
those *before* it runs :mod:`atexit` callbacks, so an ``atexit`` hook would
run too late and the interpreter would wait forever. ``threading``'s own
exit hook runs before that join (``concurrent.futures`` stops its workers
the same way) and, being registered after theirs, before the thread pools
the engine uses are stopped. Engines left open are closed there.

Fork: a child process inherits the engines but not their threads. They are
marked closed in the child, so a call raises ``EngineClosedError`` there
instead of waiting for a loop that no longer exists, and the child's exit
does not try to close them.

Engines are held weakly; an open engine is kept alive by its loop thread.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("pyweft.sync")


class Tracked(Protocol):
    def close(self) -> None: ...

    def _after_fork_in_child(self) -> None: ...


_open: weakref.WeakSet[Tracked] = weakref.WeakSet()
_lock = threading.Lock()
_installed = False


def track(engine: Tracked) -> None:
    """Close ``engine`` at interpreter exit unless :func:`forget` is called first."""
    global _installed
    with _lock:
        _open.add(engine)
        if not _installed:
            _installed = True
            _install_exit_hook(_close_all)
            os.register_at_fork(after_in_child=_orphan_all)


def forget(engine: Tracked) -> None:
    with _lock:
        _open.discard(engine)


def _install_exit_hook(hook: Callable[[], None]) -> None:
    register = getattr(threading, "_register_atexit", None)
    if register is None:  # pragma: no cover - every supported CPython has it
        atexit.register(hook)
        return
    try:
        register(hook)
    except RuntimeError:  # pragma: no cover - an engine created while Python shuts down
        atexit.register(hook)


def _close_all() -> None:
    with _lock:
        engines = list(_open)
    for engine in engines:
        try:
            engine.close()
        except Exception:
            log.exception("closing %r at interpreter exit failed", engine)


def _orphan_all() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    engines = list(_open)
    _open.clear()
    for engine in engines:
        engine._after_fork_in_child()
