"""Workflow queues: runs that wait (``enqueued``) for a slot under shared limits.

``queue.py`` the :class:`Queue` definition and its checks, ``layout.py`` the keys a
queue keeps in the store, ``enqueue.py`` writing a run onto a queue, ``dispatch.py``
the loop that starts waiting runs when limits allow, ``info.py`` what
``engine.queues()`` and ``pyweft queues`` report. See ``docs/guides/queues.md``.
"""

from __future__ import annotations

from pyweft.engine.queues.info import QueueInfo
from pyweft.engine.queues.queue import Queue

__all__ = ["Queue", "QueueInfo"]
