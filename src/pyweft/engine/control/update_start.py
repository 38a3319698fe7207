"""Update-with-start: create a run if it is absent and deliver an update to it, at once.

When the run does not exist, its state, index entries and the update request
are written in ONE conditional batch (the same create batch as ``start``), so the
update can never be lost between the start and the request, and a handler the run
registers at its first step finds it waiting. When the run exists (a racing
caller created it, or it was there before) the update is submitted to it like
``engine.update``; ``idempotency_key`` makes a retried call return the stored
answer instead of applying the update twice, whichever caller created the run.

The validator of an update delivered with the start runs when the run first
handles it (there is no live handler to ask before the run exists): a rejection
comes back as :class:`~pyweft.errors.UpdateRejectedError` all the same.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from pyweft.engine.control import creation
from pyweft.engine.control.core import EngineCore
from pyweft.engine.messages.signals import SignalSender, check_name
from pyweft.engine.messages.updates import OMITTED, UpdateClient
from pyweft.engine.replay import keys, records
from pyweft.engine.replay.records import UpdateRequest
from pyweft.errors import InvalidArgumentError
from pyweft.storage.base import Expect, Op, Put


async def update_with_start(
    core: EngineCore,
    signals: SignalSender,
    updates: UpdateClient,
    wf: Callable[..., Any] | str,
    args: tuple[Any, ...],
    *,
    id: str,
    update: str,
    payload: Any,
    timeout_s: float,
    idempotency_key: str | None,
    execution_timeout: Any,
    tags: Sequence[str],
) -> tuple[str, Any]:
    """``(workflow id, the update's answer)``; see the module doc."""
    check_name(update, "update")
    if id is None:
        raise InvalidArgumentError(
            "update_with_start needs id=: the id is how concurrent callers find one run"
        )
    workflow_id = creation.check_id(id, "id")
    data = None if payload is OMITTED else core.codec.encode(payload)
    if data is not None and len(data) > core.max_payload_bytes:
        from pyweft.codec import payload_size_error

        raise payload_size_error(len(data), core.max_payload_bytes, what="update payload")
    idem = None
    if idempotency_key is not None:
        keys.check_text(idempotency_key, "idempotency_key", keys.MAX_ID_BYTES)
        idem = keys.update_idempotency(workflow_id, idempotency_key)
    update_id = uuid.uuid4().hex
    now = core.clock.now()
    req = UpdateRequest(
        update_id=update_id,
        name=update,
        payload=data,
        created_at=now,
        idempotency_key=idempotency_key,
    )
    ops: list[Op] = [
        Put(key=keys.update_request(workflow_id, now, update_id), value=records.encode(req)),
        Put(key=keys.update_owner(update_id), value=workflow_id.encode()),
        Put(key=keys.run_update(workflow_id, update_id), value=b""),
    ]
    conds: list[Expect] = []
    if idem is not None:
        ops.append(Put(key=idem, value=update_id.encode()))
        conds.append(Expect(key=idem, value=None))
    _, created = await creation.create(
        core,
        signals,
        wf,
        args,
        id=workflow_id,
        on_conflict="use_existing",
        execution_timeout=execution_timeout,
        tags=tags,
        extra=(ops, conds),
    )
    if created:
        return workflow_id, await updates.result(update_id, timeout_s, workflow_id)
    answer = await updates.submit(workflow_id, update, payload, timeout_s, idempotency_key)
    return workflow_id, answer
