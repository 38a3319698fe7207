"""The web dashboard: a small single-page app shipped as static files inside the wheel.

It is a client of the public REST and SSE API only (docs/decisions/0030-dashboard.md):
these routes serve files and nothing else. ``create_app(engine, dashboard=True)`` (and
``pyweft serve``, unless ``--no-dashboard``) mounts them at ``/``.
"""

from __future__ import annotations

from pyweft.dashboard.assets import dashboard_routes

__all__ = ["dashboard_routes"]
