"""The ceiling for sequential steps: a bare asyncio loop committing one CAS batch
per step through a writer thread, with no engine at all.

    .venv/bin/python benchmarks/bare_sqlite_loop.py FULL|NORMAL [wal_autocheckpoint]

Run it next to engine_sqlite.py to see how much of the machine's commit rate the
engine keeps on the day (the disk and CPUs here are shared and noisy).
"""

import asyncio
import os
import queue
import sqlite3
import sys
import tempfile
import threading
import time

sync = sys.argv[1]
d = tempfile.mkdtemp()
q = queue.SimpleQueue()


def writer(loop):
    c = sqlite3.connect(os.path.join(d, "b.db"), isolation_level=None, check_same_thread=False)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute(f"PRAGMA synchronous={sync}")
    c.execute(f"PRAGMA wal_autocheckpoint={sys.argv[2] if len(sys.argv) > 2 else 1000}")
    c.execute("CREATE TABLE kv(key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID")
    while True:
        item = q.get()
        if item is None:
            return
        fut, k, v = item
        c.execute("BEGIN IMMEDIATE")
        row = c.execute("SELECT value FROM kv WHERE key=?", (k,)).fetchone()
        c.execute("INSERT OR REPLACE INTO kv VALUES (?,?)", (k, v))
        c.execute("COMMIT")
        loop.call_soon_threadsafe(fut.set_result, row is None)


async def main():
    loop = asyncio.get_running_loop()
    t = threading.Thread(target=writer, args=(loop,))
    t.start()
    n = 10000
    t0 = time.perf_counter()
    for i in range(n):
        f = loop.create_future()
        q.put((f, f"k{i:010d}", b"x" * 40))
        await f
    dt = time.perf_counter() - t0
    q.put(None)
    t.join()
    print(f"bare {sync}: {n / dt:,.0f}/s")


asyncio.run(main())
