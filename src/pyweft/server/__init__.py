"""The pyweft HTTP server: ``create_app(engine, auth=...)`` and ``pyweft serve``.

Needs the ``server`` extra: ``pip install 'pyweft[server]'``.
"""

from __future__ import annotations

from pyweft.server.app import RateLimit, create_app
from pyweft.server.auth import AuditRecord, JwtConfig, Principal, ServerAuth
from pyweft.server.cors import CorsConfig
from pyweft.server.keys import ApiKeyInfo, ApiKeyStore
from pyweft.server.scopes import SCOPES
from pyweft.server.task_hub import TaskStreamOptions

__all__ = [
    "SCOPES",
    "ApiKeyInfo",
    "ApiKeyStore",
    "AuditRecord",
    "CorsConfig",
    "JwtConfig",
    "Principal",
    "RateLimit",
    "ServerAuth",
    "TaskStreamOptions",
    "create_app",
]
