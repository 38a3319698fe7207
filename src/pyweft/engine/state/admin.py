"""``engine.state``: durable shared state as operators see it (read, list, fix, delete).

Writes from here are compare-and-swaps too, and bump the value's version, so a
workflow's ``update`` racing an operator's ``set`` retries on the operator's value.
"""

from __future__ import annotations

from typing import Any

from pyweft.engine.control.core import EngineCore
from pyweft.engine.replay import keys
from pyweft.engine.state import records
from pyweft.engine.state.records import StateRecord
from pyweft.errors import InvalidArgumentError
from pyweft.storage.base import Expect, Put, prefix_end


def _where(workflow_id: str | None, workflow_type: str | None) -> tuple[str, str]:
    if (workflow_id is None) == (workflow_type is None):
        raise InvalidArgumentError(
            "name the state's owner with exactly one of workflow_id= (state of a run and its "
            "children: the top-most parent's id) or workflow_type= (state of a workflow type)"
        )
    if workflow_id is not None:
        return "run", keys.check_text(workflow_id, "workflow_id", keys.MAX_ID_BYTES)
    assert workflow_type is not None
    return "workflow", keys.check_text(workflow_type, "workflow_type", keys.MAX_ID_BYTES)


class StateAdmin:
    """Read and change durable shared state from outside workflows."""

    def __init__(self, core: EngineCore) -> None:
        self._core = core

    async def get(
        self,
        name: str,
        *,
        workflow_id: str | None = None,
        workflow_type: str | None = None,
        default: Any = None,
    ) -> Any:
        """The stored value, or ``default`` when it was never written (or was deleted)."""
        self._core.services_or_raise()
        scope, owner = _where(workflow_id, workflow_type)
        key = records.key_for(scope, owner, records.check_name(name))
        raw = await self._core.storage.get(key)
        stored = None if raw is None else records.decode(raw, key=key)
        if stored is None or stored.value is None:
            return default
        return self._core.codec.decode(stored.value)

    async def list(
        self, *, workflow_id: str | None = None, workflow_type: str | None = None
    ) -> dict[str, Any]:
        """Every live value of one owner, by name."""
        self._core.services_or_raise()
        scope, owner = _where(workflow_id, workflow_type)
        prefix = records.run_prefix(owner) if scope == "run" else records.type_prefix(owner)
        out: dict[str, Any] = {}
        rows = await self._core.storage.scan(prefix, end=prefix_end(prefix))
        for key, raw in rows:
            stored = records.decode(raw, key=key)
            if stored.value is not None:
                out[records.name_of(key)] = self._core.codec.decode(stored.value)
        return out

    async def set(
        self,
        name: str,
        value: Any,
        *,
        workflow_id: str | None = None,
        workflow_type: str | None = None,
    ) -> None:
        """Store ``value`` (an operator's fix); runs see it at their next read."""
        await self._write(name, value, workflow_id, workflow_type, delete=False)

    async def delete(
        self, name: str, *, workflow_id: str | None = None, workflow_type: str | None = None
    ) -> None:
        """Remove the value (reads then see their ``initial``)."""
        await self._write(name, None, workflow_id, workflow_type, delete=True)

    async def _write(
        self,
        name: str,
        value: Any,
        workflow_id: str | None,
        workflow_type: str | None,
        *,
        delete: bool,
    ) -> None:
        core = self._core
        core.services_or_raise()
        scope, owner = _where(workflow_id, workflow_type)
        key = records.key_for(scope, owner, records.check_name(name))
        payload = None if delete else core.codec.encode(value)
        if payload is not None and len(payload) > core.max_payload_bytes:
            raise InvalidArgumentError(
                f"state {name!r} would be {len(payload)} bytes; the limit is "
                f"{core.max_payload_bytes} (max_payload_bytes)"
            )
        while True:
            raw = await core.storage.get(key)
            old = None if raw is None else records.decode(raw, key=key)
            if delete and (old is None or old.value is None):
                return
            stored = StateRecord(
                version=(old.version if old else 0) + 1,
                value=payload,
                updated_at=core.clock.now(),
                updated_by="operator",
            )
            put = Put(key=key, value=records.encode(stored))
            if await core.committer.commit([put], [Expect(key=key, value=raw)]):
                return
