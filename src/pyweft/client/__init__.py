"""The engine's API over HTTP: ``Client(url, token=...)`` against ``pyweft serve``.

``Client`` and ``pyweft.Engine`` both satisfy :class:`WorkflowClient`, so code
written against that protocol runs in-process or remote by configuration. Needs the
``server`` extra (``httpx``).
"""

from __future__ import annotations

from pyweft.client.handle import RemoteWorkflowHandle
from pyweft.client.http import ADDR_ENV, TOKEN_ENV, Client
from pyweft.client.protocol import WorkflowClient, WorkflowHandleLike

__all__ = [
    "ADDR_ENV",
    "TOKEN_ENV",
    "Client",
    "RemoteWorkflowHandle",
    "WorkflowClient",
    "WorkflowHandleLike",
]
