"""Updates taken with ``ctx.wait_for_update`` can be failed; a run that ends with some
taken and never answered is warned about."""

from __future__ import annotations

import logging

import pytest

from pyweft import UpdateFailedError, WorkflowContext, WorkflowTerminalError, workflow
from support.backends import Backend


@workflow
async def gatekeeper(ctx: WorkflowContext) -> list[object]:
    accepted: list[object] = []
    while len(accepted) < 2:
        request = await ctx.wait_for_update("enter")
        if request.payload == "mallory":
            request.fail(PermissionError("mallory may not enter"))
        elif request.payload == "eve":
            request.fail("eve is not on the list")
        else:
            accepted.append(request.payload)
            request.respond(len(accepted))
    return accepted


async def test_a_request_taken_with_wait_for_update_can_be_failed(backend: Backend) -> None:
    async with backend.engine(workflows=[gatekeeper]) as engine:
        handle = await engine.start(gatekeeper)
        assert await handle.update("enter", "alice") == 1
        with pytest.raises(UpdateFailedError) as denied:
            await handle.update("enter", "mallory")
        assert (denied.value.error_type, denied.value.error_message) == (
            "PermissionError",
            "mallory may not enter",
        )
        with pytest.raises(UpdateFailedError) as listed:
            await handle.update("enter", "eve")
        assert listed.value.error_type == "ApplicationError"
        assert await handle.update("enter", "bob") == 2
        assert await handle.result(timeout=5) == ["alice", "bob"]


@workflow
async def forgetful(ctx: WorkflowContext) -> str:
    await ctx.wait_for_update("ask")
    return "done"  # never answered


async def test_a_run_ending_with_an_unanswered_update_is_warned_about(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pyweft")
    async with backend.engine(workflows=[forgetful]) as engine:
        handle = await engine.start(forgetful)
        with pytest.raises(WorkflowTerminalError):
            await handle.update("ask", 1, timeout=5)
        assert await handle.result(timeout=5) == "done"
    warned = [r.getMessage() for r in caplog.records if "never answered" in r.getMessage()]
    assert len(warned) == 1
    assert "1 update(s) taken by wait_for_update" in warned[0]
