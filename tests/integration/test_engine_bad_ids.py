"""Ids and names with control characters or lone surrogates are refused wherever they enter.

A control character stored in an id reaches every terminal and log that prints
it (``\\x1b[2J`` clears the screen); a lone surrogate cannot be encoded at all.
Each entry point raises ``InvalidArgumentError`` naming the bad character and
stores nothing; inside a workflow, the run fails without recording a step.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from pyweft import (
    DefinitionError,
    Engine,
    InvalidArgumentError,
    QueryNotFoundError,
    WorkflowContext,
    WorkflowFailedError,
    workflow,
)
from support.backends import Backend
from support.poll import eventually

BAD = {
    "escape": "a\x1b[2Jb",
    "nul": "a\x00b",
    "newline": "a\nb",
    "del": "a\x7fb",
    "c1": "a\x85b",
    "surrogate": "a\ud800b",
}


def kind_of(bad: str) -> str:
    return "lone surrogate" if any("\ud800" <= c <= "\udfff" for c in bad) else "control character"


@workflow
async def waits(ctx: WorkflowContext) -> object:
    ctx.on_query("state", lambda: "waiting")
    ctx.on_update("add", lambda n: n)
    return await ctx.wait_for_signal("go")


@workflow
async def child(ctx: WorkflowContext) -> str:
    return "child"


async def snapshot(engine: Engine) -> list[tuple[str, bytes]]:
    return await engine.storage.scan("")


@pytest.fixture(params=list(BAD))
def bad(request: pytest.FixtureRequest) -> str:
    return BAD[request.param]


async def test_start_refuses_bad_ids_keys_and_tags_and_stores_nothing(
    backend: Backend, bad: str
) -> None:
    async with backend.engine(workflows=[waits]) as engine:
        before = await snapshot(engine)
        calls: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("id", lambda: engine.start(waits, id=bad)),
            ("idempotency_key", lambda: engine.start(waits, idempotency_key=bad)),
            ("tag", lambda: engine.start(waits, tags=["ok", bad])),
            ("id", lambda: engine.start_or_signal(waits, signal=("go", 1), id=bad)),
            ("signal name", lambda: engine.start_or_signal(waits, signal=(bad, 1), id="w")),
            ("signal_id", lambda: engine.start_or_signal(waits, signal=("go", 1), signal_id=bad)),
        ]
        for what, call in calls:
            with pytest.raises(InvalidArgumentError) as err:
                await call()
            assert what in str(err.value) and kind_of(bad) in str(err.value), str(err.value)
        assert await snapshot(engine) == before


async def test_messages_to_a_run_refuse_bad_names_and_ids_and_store_nothing(
    backend: Backend, bad: str
) -> None:
    async with backend.engine(workflows=[waits]) as engine:
        handle = await engine.start(waits, id="w")

        async def answers() -> bool:
            try:
                return bool(await engine.query("w", "state") == "waiting")
            except QueryNotFoundError:
                return False

        await eventually(answers, what="the run to register its query handler")
        before = await snapshot(engine)
        calls: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("signal name", lambda: engine.signal("w", bad, 1)),
            ("signal_id", lambda: engine.signal("w", "go", 1, signal_id=bad)),
            ("update name", lambda: engine.update("w", bad, 1)),
            ("idempotency_key", lambda: engine.update("w", "add", 1, idempotency_key=bad)),
            ("query name", lambda: engine.query("w", bad)),
            ("id", lambda: engine.fork("w", id=bad)),
        ]
        for what, call in calls:
            with pytest.raises(InvalidArgumentError) as err:
                await call()
            assert what in str(err.value) and kind_of(bad) in str(err.value), str(err.value)
        assert await snapshot(engine) == before
        await handle.signal("go", "done")
        assert await handle.result(timeout=5) == "done"


async def test_lookups_by_a_surrogate_id_are_invalid_not_a_unicode_crash(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[waits]) as engine:
        before = await snapshot(engine)
        for call in (
            lambda: engine.describe("a\udc80"),
            lambda: engine.signal("a\udc80", "go"),
            lambda: engine.cancel("a\udc80"),
            lambda: engine.history("a\udc80"),
        ):
            with pytest.raises(InvalidArgumentError, match="lone surrogate"):
                await call()
        assert await snapshot(engine) == before


INSIDE: dict[str, Callable[[WorkflowContext, str], Awaitable[Any]]] = {
    "child id": lambda ctx, bad: ctx.start_child(child, id=bad),
    "memo key": lambda ctx, bad: ctx.memo(bad, lambda: 1),
    "change id": lambda ctx, bad: ctx.get_version(bad, 1, 2),
    "review type": lambda ctx, bad: ctx.review("doc", review_type=bad),
    "reviewers entry": lambda ctx, bad: ctx.review("doc", reviewers=["ann", bad]),
    "signal name": lambda ctx, bad: ctx.wait_for_signal(bad),
    "update name": lambda ctx, bad: ctx.wait_for_update(bad),
}


@workflow
async def uses_bad_name(ctx: WorkflowContext, where: str, which: str) -> object:
    return await INSIDE[where](ctx, BAD[which])


@pytest.mark.parametrize("where", list(INSIDE))
async def test_bad_names_inside_a_workflow_fail_the_run_before_any_step(
    backend: Backend, where: str
) -> None:
    async with backend.engine(workflows=[uses_bad_name, child]) as engine:
        for which in ("escape", "surrogate"):
            handle = await engine.start(uses_bad_name, where, which)
            with pytest.raises(WorkflowFailedError) as err:
                await handle.result(timeout=5)
            assert err.value.error_type == "InvalidArgumentError"
            assert where in err.value.error_message
            assert (await handle.describe()).step_count == 0
            assert await engine.list_reviews(status=None) == []
        assert {i.workflow_type for i in (await engine.list()).items} == {"uses_bad_name"}


async def test_a_workflow_name_with_a_control_character_never_registers() -> None:
    with pytest.raises(DefinitionError, match="control character"):

        @workflow(name="report\x1b]0;pwned\x07")
        async def report(ctx: WorkflowContext) -> None:
            return None
