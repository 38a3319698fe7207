"""A blocking facade over :class:`pyweft.Engine`, for scripts and WSGI apps.

``pyweft.sync.Engine`` runs the async engine on one background thread with
its own event loop; every method blocks until the loop has done the work::

    import pyweft.sync

    with pyweft.sync.Engine("sqlite:///app.db", workflows=[checkout]) as engine:
        handle = engine.start(checkout, {"id": 1}, id="order-1")
        engine.signal("order-1", "approval", {"ok": True})
        print(handle.result(timeout="1m"))

Workflows and activities are written exactly as for the async engine. See
``docs/guides/sync.md``.
"""

from __future__ import annotations

from pyweft.sync.engine import Engine
from pyweft.sync.events import EventIterator
from pyweft.sync.handle import WorkflowHandle
from pyweft.sync.worker import Worker

__all__ = ["Client", "Engine", "EventIterator", "Worker", "WorkflowHandle"]


def __getattr__(name: str) -> object:
    # The blocking HTTP client needs the ``server`` extra (httpx): imported on first use.
    if name == "Client":
        from pyweft.client.sync import Client

        return Client
    raise AttributeError(f"module 'pyweft.sync' has no attribute {name!r}")
