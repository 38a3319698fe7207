"""Who is calling, and may they: credentials, principals, scope checks and the audit log.

Credentials come from ``Authorization: Bearer <token>`` or ``X-API-Key: <token>``.
A token that starts with ``pwk_`` is an API key checked against the store; any other
token is a JWT when ``ServerAuth(jwt=...)`` is set. Outcomes, exactly:

* the route is public (health, version, principal, OpenAPI): allowed, not audited;
* no credential, or one that is malformed, unknown, expired, revoked or does not
  verify: **401** ``AuthenticationError``;
* a valid credential without any of the route's scopes: **403** ``PermissionDeniedError``.

Every decision on a non-public route is logged once on ``pyweft.server.audit`` (and
passed to ``ServerAuth.audit_sink``): subject, method, path, outcome and, for a
rejected credential, a one-way fingerprint of it. The credential itself never is.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.requests import HTTPConnection

from pyweft import AuthenticationError, ConfigurationError, PermissionDeniedError
from pyweft.server.keys import ApiKeyStore, looks_like_key
from pyweft.server.scopes import SCOPE_SET, SCOPES

audit_log = logging.getLogger("pyweft.server.audit")


@dataclass(frozen=True, kw_only=True, slots=True)
class Principal:
    """The caller of one request."""

    subject: str
    method: str  # "api-key", "jwt", "open" (no auth configured) or "anonymous"
    scopes: frozenset[str]

    @property
    def authenticated(self) -> bool:
        return self.method in {"api-key", "jwt"}


OPEN = Principal(subject="anonymous", method="open", scopes=frozenset(SCOPES))
ANONYMOUS = Principal(subject="anonymous", method="anonymous", scopes=frozenset())


@dataclass(frozen=True, kw_only=True, slots=True)
class JwtConfig:
    """Verify bearer JWTs: ``key`` (HMAC secret or PEM public key), ``algorithms``,
    ``audience`` and optional ``issuer``. Scopes come from the ``scope`` claim
    (space-separated, OAuth style) or the ``scopes`` claim (a list)."""

    key: str
    algorithms: tuple[str, ...] = ("HS256",)
    audience: str | None = None
    issuer: str | None = None
    leeway_s: float = 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditRecord:
    subject: str | None
    auth_method: str | None
    http_method: str
    path: str
    outcome: str  # "allowed", "unauthenticated", "forbidden"
    reason: str
    credential_fingerprint: str | None = None


@dataclass(kw_only=True)
class ServerAuth:
    """Authentication for :func:`pyweft.server.create_app`.

    ``api_keys=True`` checks API keys kept in the engine's store (``pyweft keys
    create``). ``jwt`` adds JWT bearer tokens. ``audit_sink`` receives every
    :class:`AuditRecord` as well as the ``pyweft.server.audit`` logger.
    """

    api_keys: bool = True
    jwt: JwtConfig | None = None
    audit_sink: Callable[[AuditRecord], None] | None = None
    clock: Callable[[], float] = time.time  # wall clock for key expiry (tests inject one)

    def __post_init__(self) -> None:
        if not self.api_keys and self.jwt is None:
            raise ConfigurationError(
                "ServerAuth needs api_keys=True or a jwt configuration; to run without "
                "authentication pass auth=None (and allow_unauthenticated=True off loopback)"
            )
        if self.jwt is not None and not self.jwt.algorithms:
            raise ConfigurationError("JwtConfig.algorithms must name at least one algorithm")


def fingerprint(credential: str) -> str:
    """A one-way, non-reversible tag of a credential for the audit log."""
    return "sha256:" + hashlib.sha256(credential.encode()).hexdigest()[:16]


def credential_of(conn: HTTPConnection) -> str | None:
    header = conn.headers.get("authorization")
    if header is not None:
        scheme, _, token = header.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
        return ""  # present but not a bearer token: malformed
    key = conn.headers.get("x-api-key")
    if key is not None:
        return key.strip()
    return None


class Authenticator:
    def __init__(self, auth: ServerAuth | None, keys: ApiKeyStore) -> None:
        self._auth = auth
        self._keys = keys

    @property
    def enabled(self) -> bool:
        return self._auth is not None

    async def principal(self, conn: HTTPConnection) -> tuple[Principal, str | None, str]:
        """The caller (``ANONYMOUS`` when none or rejected), the credential, and why."""
        if self._auth is None:
            return OPEN, None, "open server"
        token = credential_of(conn)
        if token is None:
            return ANONYMOUS, None, "no credential"
        if not token:
            return ANONYMOUS, token, "malformed Authorization header (use Bearer <token>)"
        if looks_like_key(token) or self._auth.jwt is None:
            if not self._auth.api_keys:
                return ANONYMOUS, token, "API keys are not accepted by this server"
            check = await self._keys.check(token, now=self._auth.clock())
            if not check.ok or check.info is None:
                return ANONYMOUS, token, check.reason
            info = check.info
            return (
                Principal(subject=info.subject, method="api-key", scopes=frozenset(info.scopes)),
                token,
                "ok",
            )
        return self._jwt(token)

    def _jwt(self, token: str) -> tuple[Principal, str | None, str]:
        import jwt  # PyJWT, part of the server extra

        cfg = self._auth.jwt if self._auth is not None else None
        assert cfg is not None
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                cfg.key,
                algorithms=list(cfg.algorithms),
                audience=cfg.audience,
                issuer=cfg.issuer,
                leeway=cfg.leeway_s,
                options={"require": ["exp", "sub"]},
            )
        except jwt.PyJWTError as exc:
            return ANONYMOUS, token, f"JWT rejected: {type(exc).__name__}"
        raw = claims.get("scopes", claims.get("scope", []))
        scopes: Sequence[Any] = raw.split() if isinstance(raw, str) else raw
        granted = frozenset(s for s in scopes if isinstance(s, str) and s in SCOPE_SET)
        return Principal(subject=str(claims["sub"]), method="jwt", scopes=granted), token, "ok"

    def decide(
        self,
        found: tuple[Principal, str | None, str],
        scopes: Sequence[str],
        method: str,
        path: str,
    ) -> Principal:
        """The principal (from :meth:`principal`) if it may call a route needing any one
        of ``scopes``; else raise 401 or 403."""
        principal, token, reason = found
        if not self.enabled:
            return principal
        if not principal.authenticated:
            self._audit(None, method, path, "unauthenticated", reason, token)
            raise AuthenticationError(
                f"authentication required: {reason}; send Authorization: Bearer <api key>"
            )
        if scopes and not any(s in principal.scopes for s in scopes):
            self._audit(principal, method, path, "forbidden", "missing scope", None)
            raise PermissionDeniedError(
                f"{principal.subject!r} lacks the scope for {method} {path}; "
                f"needs one of: {', '.join(scopes)}",
                required=list(scopes),
            )
        self._audit(principal, method, path, "allowed", "ok", None)
        return principal

    def _audit(
        self,
        principal: Principal | None,
        method: str,
        path: str,
        outcome: str,
        reason: str,
        token: str | None,
    ) -> None:
        record = AuditRecord(
            subject=principal.subject if principal else None,
            auth_method=principal.method if principal else None,
            http_method=method,
            path=path,
            outcome=outcome,
            reason=reason,
            credential_fingerprint=fingerprint(token) if token else None,
        )
        audit_log.info(
            "auth %s %s %s subject=%s reason=%s credential=%s",
            record.outcome,
            record.http_method,
            record.path,
            record.subject,
            record.reason,
            record.credential_fingerprint,
        )
        if self._auth is not None and self._auth.audit_sink is not None:
            self._auth.audit_sink(record)


class RateLimiter:
    """A fixed window per principal subject (or client address for anonymous callers).

    Per process, not shared between server processes.
    """

    def __init__(self, max_requests: int, window_s: float, clock: Callable[[], float]) -> None:
        if max_requests < 1 or window_s <= 0:
            raise ConfigurationError("rate_limit needs max_requests >= 1 and window_s > 0")
        self.max_requests = max_requests
        self.window_s = window_s
        self._clock = clock
        self._windows: dict[str, tuple[float, int]] = {}

    def hit(self, who: str) -> float | None:
        """Count one request; ``None`` when allowed, else seconds until the window resets."""
        now = self._clock()
        start, count = self._windows.get(who, (now, 0))
        if now - start >= self.window_s:
            start, count = now, 0
        if count >= self.max_requests:
            return start + self.window_s - now
        self._windows[who] = (start, count + 1)
        if len(self._windows) > 100_000:  # forget idle callers rather than grow forever
            cutoff = now - self.window_s
            self._windows = {k: v for k, v in self._windows.items() if v[0] > cutoff}
        return None


def monotonic() -> float:
    return time.monotonic()
