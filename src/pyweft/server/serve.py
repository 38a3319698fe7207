"""Run the app under uvicorn for one engine: what ``pyweft serve`` does.

The engine is entered (opened, recovered) before the socket is bound and closed
after uvicorn has finished in-flight requests, so a SIGTERM drains: uvicorn stops
accepting, waits up to ``graceful_s`` for open requests and streams, runs the
app's shutdown (ending every event feed), then the engine shuts down.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import signal
import threading
from collections.abc import Iterator
from typing import Any

from pyweft import ConfigurationError, Engine
from pyweft.server.app import RateLimit, create_app
from pyweft.server.auth import ServerAuth
from pyweft.server.collector import server_gc_threshold
from pyweft.server.cors import CorsConfig

log = logging.getLogger("pyweft.server")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, auth: ServerAuth | None, allow_unauthenticated: bool) -> None:
    """Refuse to serve every operation to the network without authentication."""
    if auth is None and not is_loopback(host) and not allow_unauthenticated:
        raise ConfigurationError(
            f"refusing to bind {host} without authentication: anyone who can reach it could "
            "start, cancel and purge runs. Use auth (pyweft serve --auth keys, after "
            "`pyweft keys create`), bind 127.0.0.1, or pass allow_unauthenticated "
            "(--allow-unauthenticated) if a proxy in front authenticates"
        )
    if auth is None:
        log.warning("serving %s without authentication: every caller has every scope", host)


async def serve(
    engine: Engine,
    *,
    host: str = "127.0.0.1",
    port: int = 7233,
    auth: ServerAuth | None = None,
    allow_unauthenticated: bool = False,
    cors: CorsConfig | None = None,
    rate_limit: RateLimit | None = None,
    graceful_s: int = 10,
    uvicorn_options: dict[str, Any] | None = None,
    dashboard: bool = True,
) -> None:
    """Serve ``engine`` (not yet opened) until SIGINT/SIGTERM, then drain and close it."""
    import uvicorn

    check_exposure(host, auth, allow_unauthenticated)
    config: dict[str, Any] = {
        "host": host,
        "port": port,
        "lifespan": "on",
        "timeout_graceful_shutdown": graceful_s,
        "ws_max_size": 1024 * 1024,
        "log_level": "info",
        **(uvicorn_options or {}),
    }
    with server_gc_threshold():  # the process's collector, for the server's lifetime
        async with engine:
            app = create_app(
                engine, auth=auth, cors=cors, rate_limit=rate_limit, dashboard=dashboard
            )
            journal = app.state.pyweft.journal
            hub = app.state.pyweft_tasks  # remote workers finish their attempts first

            async def drain_workers() -> None:
                await hub.shutdown(timeout_s=graceful_s, reason="server stopping")

            await _Server(
                uvicorn.Config(app, **config), on_exit=journal.end_feeds, before_exit=drain_workers
            ).serve()


def _server_class() -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn re-raises a caught SIGTERM once it has drained, which would kill the
        process before the engine below it shuts down; here the signal only stops the
        server, and ``serve`` returns so the engine closes and the process exits 0. The
        signal also ends the event feeds at once, so open streams do not hold up the
        drain for the whole grace period."""

        on_exit: Any = None
        before_exit: Any = None  # a coroutine function run before uvicorn stops
        loop: Any = None
        _draining = False

        def handle_exit(self, sig: int, frame: Any) -> None:
            if self.before_exit is not None and self.loop is not None and not self._draining:
                # First ask the remote workers to finish and close (uvicorn would cut
                # their sockets at once); a second signal stops at once.
                self._draining = True
                with contextlib.suppress(RuntimeError):
                    self.loop.call_soon_threadsafe(self._drain_then_exit, sig, frame)
                    return
            super().handle_exit(sig, frame)
            if self.on_exit is not None and self.loop is not None:
                with contextlib.suppress(RuntimeError):  # the loop already closed
                    self.loop.call_soon_threadsafe(self.on_exit)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            import asyncio

            self.loop = asyncio.get_running_loop()
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            sigs = (signal.SIGINT, signal.SIGTERM)
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in sigs}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

        def _drain_then_exit(self, sig: int, frame: Any) -> None:
            import asyncio

            async def drain() -> None:
                try:
                    await self.before_exit()
                except Exception:
                    log.exception("draining the remote workers failed")
                finally:
                    self.handle_exit(sig, frame)

            self._drain_task = asyncio.ensure_future(drain())

    return Server


class _Server:
    def __init__(self, config: Any, on_exit: Any = None, before_exit: Any = None) -> None:
        self._server = _server_class()(config)
        self._server.on_exit = on_exit
        self._server.before_exit = before_exit

    async def serve(self) -> None:
        await self._server.serve()
