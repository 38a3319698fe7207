"""The replay checker catches code changes that break recorded histories."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pyweft import InvalidArgumentError, WorkflowContext, activity, workflow
from pyweft.testing import TestEnv, export_history, replay


@activity
async def reserve(item: str) -> str:
    return f"reserved {item}"


@activity
async def charge(item: str) -> str:
    return f"charged {item}"


@activity
async def ship(item: str) -> str:
    return f"shipped {item}"


@workflow(name="order")
async def original(ctx: WorkflowContext, item: str) -> list[str]:
    out = [await ctx.run(reserve, item), await ctx.run(charge, item)]
    await ctx.sleep("1h")
    out.append(await ctx.run(ship, item))
    return out


async def recorded(*, finish: bool) -> dict[str, Any]:
    async with TestEnv(workflows=[original]) as env:
        handle = await env.start(original, "book", id="o-1")
        if finish:
            await env.advance("1h")
            await env.result(handle)
        history = await export_history(env.engine, "o-1")
    return json.loads(json.dumps(history))  # as read back from a file


def variant(body: Any) -> Any:
    return workflow(name="order")(body)


@pytest.mark.parametrize("finish", [True, False])
async def test_the_same_code_replays_its_own_history(finish: bool) -> None:
    history = await recorded(finish=finish)
    result = await replay(history, [original])
    assert result.ok, result
    assert result.recorded_steps == (4 if finish else 2)  # an open sleep is no journal step


async def test_a_reordered_step_is_caught_with_its_step_and_the_diff() -> None:
    async def reordered(ctx: WorkflowContext, item: str) -> list[str]:
        out = [await ctx.run(charge, item), await ctx.run(reserve, item)]
        await ctx.sleep("1h")
        out.append(await ctx.run(ship, item))
        return out

    result = await replay(await recorded(finish=True), [variant(reordered)])
    assert not result.ok and result.step == 1
    assert result.error_type == "NonDeterminismError"
    assert "reserve" in (result.message or "") and "charge" in (result.message or "")


async def test_an_inserted_step_is_caught() -> None:
    async def inserted(ctx: WorkflowContext, item: str) -> list[str]:
        out = [await ctx.run(reserve, item)]
        await ctx.sleep("1m")
        out.append(await ctx.run(charge, item))
        await ctx.sleep("1h")
        out.append(await ctx.run(ship, item))
        return out

    result = await replay(await recorded(finish=True), [variant(inserted)])
    assert not result.ok and result.step == 2


async def test_a_changed_activity_is_caught() -> None:
    async def changed(ctx: WorkflowContext, item: str) -> list[str]:
        out = [await ctx.run(reserve, item), await ctx.run(charge, item)]
        await ctx.sleep("1h")
        out.append(await ctx.run(charge, item))  # was ship
        return out

    result = await replay(await recorded(finish=True), [variant(changed)])
    assert not result.ok and result.step == 4


async def test_a_removed_last_step_is_caught() -> None:
    async def shorter(ctx: WorkflowContext, item: str) -> list[str]:
        out = [await ctx.run(reserve, item), await ctx.run(charge, item)]
        await ctx.sleep("1h")
        return out

    result = await replay(await recorded(finish=True), [variant(shorter)])
    assert not result.ok and result.step == 4 and "asks for nothing" in (result.message or "")


async def test_a_change_guarded_by_get_version_passes() -> None:
    async def guarded(ctx: WorkflowContext, item: str) -> list[str]:
        out = [await ctx.run(reserve, item), await ctx.run(charge, item)]
        await ctx.sleep("1h")
        if await ctx.get_version("gift-wrap", 0, 1) == 1:
            out.append(await ctx.run(charge, f"wrapping {item}"))
        out.append(await ctx.run(ship, item))
        return out

    history = await recorded(finish=False)  # the run was waiting in its sleep at export
    result = await replay(history, [variant(guarded)])
    assert result.ok, result


async def test_replay_refuses_what_is_not_a_history() -> None:
    with pytest.raises(InvalidArgumentError, match="not a pyweft history"):
        await replay({"steps": []}, [original])
    history = await recorded(finish=True)
    with pytest.raises(InvalidArgumentError, match="registers no workflow 'order'"):
        await replay(history, [])
