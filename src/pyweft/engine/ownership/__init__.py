"""Who may write to a store: ownership modes, the mode marker, and the detector."""

from __future__ import annotations

import json
from typing import Literal

from pyweft.errors import OwnershipModeMismatchError, StorageCapabilityError
from pyweft.storage.base import Expect, Put, Storage

OwnershipMode = Literal["none", "lease", "workflow-lease"]
MODES: tuple[str, ...] = ("none", "lease", "workflow-lease")
MARKER_KEY = "meta:ownership-mode"


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
