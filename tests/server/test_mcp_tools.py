"""The MCP tool table on its own (no SDK, no transport): every tool drives the engine
through its public API, and bad arguments are refused by name before anything runs."""

from __future__ import annotations

from typing import Any

import pytest

from pyweft import (
    Engine,
    InvalidArgumentError,
    MemoryStorage,
    WorkflowCancelledError,
    WorkflowContext,
    workflow,
)
from pyweft.server.mcp import tools

from .conftest import WORKFLOWS


@workflow
async def three_args(ctx: WorkflowContext, a: int, b: int = 2, c: int = 3) -> list[int]:
    return [a, b, c]


@pytest.fixture
async def engine() -> Any:
    async with Engine(MemoryStorage(), workflows=[*WORKFLOWS, three_args]) as eng:
        yield eng


async def _call(engine: Engine, tool: str, /, **args: Any) -> Any:
    return await tools.call(tools.all_tools(engine)[tool], engine, args)


async def test_typed_start_fills_a_skipped_optional_argument_with_its_default(
    engine: Engine,
) -> None:
    spec = tools.all_tools(engine)["start_three_args"]
    assert spec.input_schema["required"] == ["a"]
    assert spec.input_schema["properties"]["b"]["default"] == 2
    run = await _call(engine, "start_three_args", a=1, c=5)
    done = await _call(engine, "workflow_result", workflow_id=run["id"], wait_s=10)
    assert done["result"] == [1, 2, 5]


async def test_signal_query_update_and_cancel_tools_act_on_a_live_run(engine: Engine) -> None:
    run = await _call(engine, "start_workflow", type="waits_for_go", id="live-1")
    assert run == {"id": "live-1"}
    assert await _call(engine, "update_workflow", workflow_id="live-1", name="bump", payload=2)
    seen = await _call(engine, "query_workflow", workflow_id="live-1", name="seen")
    assert seen == {"result": 2}
    await _call(engine, "signal_workflow", workflow_id="live-1", name="go", payload="now")
    done = await _call(engine, "workflow_result", workflow_id="live-1", wait_s=10)
    assert done["result"] == {"go": "now"}
    other = await _call(engine, "start_workflow", type="collects_two")
    assert await _call(engine, "cancel_workflow", workflow_id=other["id"]) == {"ok": True}
    with pytest.raises(WorkflowCancelledError):
        await _call(engine, "workflow_result", workflow_id=other["id"], wait_s=10)
    described = await _call(engine, "describe_workflow", workflow_id=other["id"])
    assert described["status"] == "cancelled"


@pytest.mark.parametrize(
    ("name", "args", "named"),
    [
        ("start_workflow", {}, "type"),
        ("start_workflow", {"type": "add_three", "args": "[1]"}, "'args' must be array"),
        ("list_workflows", {"limit": 0}, "limit"),
        ("list_workflows", {"colour": "red"}, "colour"),
        ("query_workflow", {"workflow_id": "x"}, "name"),
        ("workflow_result", {"workflow_id": "x", "wait_s": True}, "wait_s"),
    ],
)
async def test_bad_arguments_are_refused_by_name_and_start_nothing(
    engine: Engine, name: str, args: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=named):
        await tools.call(tools.all_tools(engine)[name], engine, args)
    assert (await engine.list()).items == []
