"""The garbage collector's settings for a ``pyweft serve`` process.

A busy engine keeps many container objects alive: every run in memory holds its
state, its task and its coroutine frames, and a server keeps up to
``max_cached_runs`` of them. CPython collects the young generation every 700 net
allocations by default; each pass walks everything young and alive at that moment
(on a server, the objects of every request in flight), and the middle and full
passes that follow walk the runs again, a full one every thousand or so starts
(165-225 ms each with 10,000 runs in memory). Under a stream of starts of runs that
wait for a signal (``benchmarks/server_http.py``) the collector took about 45% of
the server's CPU; with a threshold of 10,000 it takes a quarter of that, and a full
pass comes about every ten thousand starts. Cyclic garbage then waits a little
longer before it is freed: a few MB at most.

The server only raises the threshold: a process that has set a higher one, or turned
the collector off (``gc.disable()`` or a threshold of 0), is left as it is. The
setting is the process's, so ``serve`` restores it when it returns. See
docs/decisions/0035-server-process-gc-threshold.md.
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
    if not gc.isenabled() or previous[0] == 0 or previous[0] >= gen0:  # 0: also off
        yield
        return
    gc.set_threshold(gen0, *previous[1:])
    try:
        yield
    finally:
        if gc.get_threshold()[0] == gen0:  # unless someone changed it meanwhile
            gc.set_threshold(*previous)
