"""API keys, kept in the engine's store under ``srv:apikey:`` and only as hashes.

A key reads ``pwk_<key_id>_<secret>``. The id is not secret (it names the record,
and ``pyweft keys list`` shows it); the secret is 32 random bytes, stored only as
its SHA-256, and compared with :func:`hmac.compare_digest`. A lookup for an unknown
id still runs one comparison against a dummy hash, so a caller cannot time the
difference between "no such key" and "wrong secret". Revocation and expiry take
effect on the next request: every request reads the record from the store.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from pyweft import InvalidArgumentError, Storage
from pyweft.server.scopes import SCOPES, is_scope
from pyweft.storage import Put

PREFIX = "srv:apikey:"
TOKEN_PREFIX = "pwk_"
_TOKEN = re.compile(r"^pwk_([0-9a-f]{16})_([A-Za-z0-9_-]{20,100})$")
_DUMMY_HASH = hashlib.sha256(b"pyweft-no-such-key").hexdigest()


class _KeyRecord(msgspec.Struct):
    key_id: str
    subject: str
    scopes: list[str]
    secret_sha256: str
    created_at: float
    expires_at: float | None = None
    revoked_at: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ApiKeyInfo:
    """An API key as listed: everything but its secret."""

    key_id: str
    subject: str
    scopes: tuple[str, ...]
    created_at: float
    expires_at: float | None
    revoked_at: float | None

    def state(self, now: float) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and now >= self.expires_at:
            return "expired"
        return "active"


@dataclass(frozen=True, kw_only=True, slots=True)
class KeyCheck:
    """The outcome of checking a presented key: ``info`` when ``ok``, else a ``reason``."""

    ok: bool
    reason: str
    info: ApiKeyInfo | None = None


def _info(rec: _KeyRecord) -> ApiKeyInfo:
    return ApiKeyInfo(
        key_id=rec.key_id,
        subject=rec.subject,
        scopes=tuple(rec.scopes),
        created_at=rec.created_at,
        expires_at=rec.expires_at,
        revoked_at=rec.revoked_at,
    )


def _sha(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def looks_like_key(token: str) -> bool:
    return token.startswith(TOKEN_PREFIX)


class ApiKeyStore:
    """Create, list, revoke and check API keys in ``storage``."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    async def create(
        self, *, subject: str, scopes: Sequence[str], expires_at: float | None = None
    ) -> tuple[ApiKeyInfo, str]:
        """A new key; returns its record and the full token (shown once, never stored)."""
        if not isinstance(subject, str) or not subject.strip() or len(subject) > 200:
            raise InvalidArgumentError("subject must be a non-empty string of at most 200 chars")
        bad = [s for s in scopes if not is_scope(s)]
        if bad:
            raise InvalidArgumentError(
                f"unknown scope(s) {', '.join(map(repr, bad))}; valid scopes: {', '.join(SCOPES)}"
            )
        if expires_at is not None and expires_at <= time.time():
            raise InvalidArgumentError("expires_at must be in the future")
        key_id = secrets.token_hex(8)
        secret = secrets.token_urlsafe(32)
        rec = _KeyRecord(
            key_id=key_id,
            subject=subject,
            scopes=sorted(set(scopes)),
            secret_sha256=_sha(secret),
            created_at=time.time(),
            expires_at=expires_at,
        )
        await self._storage.batch([Put(key=PREFIX + key_id, value=msgspec.json.encode(rec))])
        return _info(rec), f"{TOKEN_PREFIX}{key_id}_{secret}"

    async def _load(self, key_id: str) -> _KeyRecord | None:
        raw = await self._storage.get(PREFIX + key_id)
        return None if raw is None else msgspec.json.decode(raw, type=_KeyRecord)

    async def list(self) -> list[ApiKeyInfo]:
        rows = await self._storage.scan(PREFIX)
        return [_info(msgspec.json.decode(raw, type=_KeyRecord)) for _, raw in rows]

    async def revoke(self, key_id: str) -> ApiKeyInfo:
        """Revoke a key at once (revoking twice keeps the first time)."""
        rec = await self._load(key_id) if re.fullmatch(r"[0-9a-f]{16}", key_id) else None
        if rec is None:
            raise InvalidArgumentError(f"no API key with id {key_id!r}; see `pyweft keys list`")
        if rec.revoked_at is None:
            rec.revoked_at = time.time()
            await self._storage.batch([Put(key=PREFIX + key_id, value=msgspec.json.encode(rec))])
        return _info(rec)

    async def check(self, token: str, now: float | None = None) -> KeyCheck:
        """Whether ``token`` is a live key. Constant time in the secret."""
        now = time.time() if now is None else now
        match = _TOKEN.match(token)
        if match is None:
            hmac.compare_digest(_DUMMY_HASH, _sha(token))
            return KeyCheck(ok=False, reason="malformed API key")
        key_id, secret = match.groups()
        rec = await self._load(key_id)
        stored = rec.secret_sha256 if rec is not None else _DUMMY_HASH
        same = hmac.compare_digest(stored, _sha(secret))
        if rec is None or not same:
            return KeyCheck(ok=False, reason="unknown API key")
        info = _info(rec)
        state = info.state(now)
        if state != "active":
            return KeyCheck(ok=False, reason=f"API key {state}")
        return KeyCheck(ok=True, reason="ok", info=info)
