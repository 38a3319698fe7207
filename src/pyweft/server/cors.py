"""CORS: off unless configured; exact origins echoed; unsafe combinations refused at boot."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyweft import ConfigurationError


@dataclass(frozen=True, kw_only=True)
class CorsConfig:
    """Browsers on ``allowed_origins`` (exact ``scheme://host[:port]`` strings) may call
    the API. ``"*"`` allows any origin, but never together with ``allow_credentials``
    or an ``Authorization`` header: the server refuses to start with either."""

    allowed_origins: Sequence[str]
    allowed_headers: Sequence[str] = ("Authorization", "Content-Type", "Last-Event-ID")
    allow_credentials: bool = False
    max_age_s: int = 600

    def validate(self) -> None:
        origins = list(self.allowed_origins)
        if not origins:
            raise ConfigurationError("CorsConfig.allowed_origins is empty; pass cors=None instead")
        if "*" in origins:
            if self.allow_credentials:
                raise ConfigurationError(
                    "CORS '*' with allow_credentials would let any site act as the user; "
                    "list the exact origins instead"
                )
            if any(h.lower() == "authorization" for h in self.allowed_headers):
                raise ConfigurationError(
                    "CORS '*' with the Authorization header would let any site send "
                    "credentials; list the exact origins, or drop Authorization"
                )
        for origin in origins:
            if origin == "null" or (origin != "*" and "://" not in origin):
                raise ConfigurationError(
                    f"CORS origin {origin!r} must be scheme://host[:port] ('null' never matches)"
                )
            if origin.endswith("/"):
                raise ConfigurationError(f"CORS origin {origin!r} must not end with '/'")


def origin_allowed(origin: str | None, host: str | None, cors: CorsConfig | None) -> bool:
    """Whether a request carrying ``Origin: origin`` may act.

    Browsers send ``Origin`` on every cross-site write and WebSocket upgrade; other
    clients send none. A page from another site must not make a browser act on this
    server (CSRF, cross-site WebSocket hijacking), even an open one on loopback, so a
    request with an ``Origin`` is refused unless it is this server's own origin or one
    CORS allows.
    """
    if origin is None:
        return True
    if origin == "null":
        return False
    if cors is not None and (origin in cors.allowed_origins or "*" in cors.allowed_origins):
        return True
    _, _, rest = origin.partition("://")
    return host is not None and rest == host
