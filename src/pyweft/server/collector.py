"""The garbage collector's settings for a ``pyweft serve`` process.

A busy engine keeps many container objects alive: every run in memory holds its
state, its task and its coroutine frames, and a server parks thousands of them. The
collector's young generation is collected every 700 net allocations by default;
each pass walks every object that has not yet been promoted, so new runs parked in
memory are walked many times over, and the cascade of middle and full collections
walks the whole heap about every thousand starts. Under a stream of starts of runs
that wait for a signal (``benchmarks/server_http.py``) that took about 40% of the
server's CPU. A threshold of 10,000 cuts the collector's share by three quarters;
cyclic garbage then waits a little longer (a few MB at most) before it is freed.

The server only raises the threshold: a process that has set a higher one, or turned
the collector off, is left as it is. The setting is the process's, so ``serve``
restores it when it returns. See docs/decisions/0035-server-process-gc-threshold.md.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

SERVER_GEN0_THRESHOLD = 10_000


@contextlib.contextmanager
def server_gc_threshold(gen0: int = SERVER_GEN0_THRESHOLD) -> Iterator[None]:
    """Within the block, collect the young generation every ``gen0`` allocations at
    the earliest (the current threshold if higher, or the collector is off)."""
    previous = gc.get_threshold()
    if not gc.isenabled() or previous[0] >= gen0:
        yield
        return
    gc.set_threshold(gen0, *previous[1:])
    try:
        yield
    finally:
        if gc.get_threshold()[0] == gen0:  # unless someone changed it meanwhile
            gc.set_threshold(*previous)
