"""Who may write to a store: ownership modes, the mode marker, and the detector."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pyweft.errors import OwnershipModeMismatchError, StorageCapabilityError
from pyweft.storage.base import Expect, Put, Storage

OwnershipMode = Literal["none", "lease", "workflow-lease"]
MODES: tuple[str, ...] = ("none", "lease", "workflow-lease")
MARKER_KEY = "meta:ownership-mode"


def resolve_ownership(mode: str | None, storage: Storage) -> str:
    """The mode an engine uses: ``mode`` itself, or the store's default for ``None``
    (at open, an engine with ``None`` then joins the mode the store's marker records).

    No default may run a step twice: a local store (SQLite, memory) defaults to
    ``"none"``, which on SQLite takes the file lock so a second engine cannot open;
    a shared store (PostgreSQL, any adapter declaring ``persistence="remote"``)
    defaults to ``"workflow-lease"``, where every run is fenced by its own claim.
    """
    if mode is not None:
        return mode
    return "workflow-lease" if storage.capabilities.persistence == "remote" else "none"


async def stored_mode(storage: Storage) -> str | None:
    """The fencing mode the store's marker records, if any (engines with ``"none"``
    leave no marker)."""
    raw = await storage.get(MARKER_KEY)
    if raw is None:
        return None
    try:
        mode = json.loads(raw).get("mode")
    except (ValueError, AttributeError):
        return None
    return mode if isinstance(mode, str) else None


def store_label(storage: Storage) -> str:
    """A stable name for where ``storage`` keeps its data (for the default engine id)."""
    path = getattr(storage, "path", None)
    if isinstance(path, str):
        import os

        return "sqlite:" + os.path.realpath(path)
    schema = getattr(storage, "schema", None)
    if isinstance(schema, str):
        return f"{type(storage).__name__}:{storage!r}:{schema}"
    # Anything else (a wrapper, a custom adapter): its type, which is stable across
    # restarts; an engine only ever sees the records of its own store anyway.
    return f"{type(storage).__module__}.{type(storage).__qualname__}"


async def check_mode_marker(storage: Storage, mode: str, now: float) -> None:
    """Fencing modes must not share a store: record ours, or refuse a different one."""
    if mode == "none":
        return
    if not storage.capabilities.conditional_batch:
        raise StorageCapabilityError(
            f"ownership={mode!r} needs a store with conditional batches (compare-and-swap)"
        )
    marker = json.dumps({"mode": mode, "established_at": now}).encode()
    for _ in range(3):
        raw = await storage.get(MARKER_KEY)
        if raw is None:
            if await storage.conditional_batch(
                [Expect(key=MARKER_KEY, value=None)], [Put(key=MARKER_KEY, value=marker)]
            ):
                return
            continue
        try:
            stored = json.loads(raw).get("mode")
        except (ValueError, AttributeError):
            stored = "<unreadable>"
        if stored != mode:
            raise OwnershipModeMismatchError(
                f"this store is used with ownership={stored!r}; an engine with "
                f"ownership={mode!r} must not share it. Stop every engine before changing modes "
                f"(then delete the key {MARKER_KEY})",
                configured_mode=mode,
                stored_mode=str(stored),
            )
        return


async def confirm_owned(fence: object, workflow_id: str) -> None:
    """Raise unless this engine may still act for ``workflow_id`` (its store lease or
    its claim on the run is valid by its own clock, with a margin, or was renewed just
    now). Called before every side effect the engine starts, such as an activity; a
    claim or lease that lapsed raises an engine failure, which tears the run down."""
    confirm = getattr(fence, "confirm", None)
    if confirm is not None:
        await confirm(workflow_id)


@dataclass(frozen=True, kw_only=True, slots=True)
class StoreOwnership:
    """What a store records about who may write to it (``engine.store_ownership()``)."""

    mode: str | None  # the mode marker of fencing engines; None if only 'none' engines used it
    lease_holder: str | None = None
    lease_epoch: int | str | None = None
    lease_expires_at: float | None = None
    lease_live: bool = False
    live_claims: int = 0


async def read_ownership(storage: Storage, now: float) -> StoreOwnership:
    from pyweft.engine.ownership.claims import decode_holder as decode_claim
    from pyweft.engine.ownership.lease import read_lease

    raw = await storage.get(MARKER_KEY)
    mode: str | None = None
    if raw is not None:
        try:
            data: Any = json.loads(raw)
            mode = str(data.get("mode"))
        except (ValueError, AttributeError):
            mode = "<unreadable>"
    lease = await read_lease(storage, now)
    live = 0
    for _, value in await storage.scan("own:h:"):
        holder = decode_claim(value)
        if holder is not None and holder.expires_at_ms > now * 1000:
            live += 1
    return StoreOwnership(
        mode=mode,
        lease_holder=lease["holder"],
        lease_epoch=lease["epoch"],
        lease_expires_at=lease["expires_at"],
        lease_live=lease["live"],
        live_claims=live,
    )
