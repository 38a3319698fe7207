"""Interceptors (order, every hook, the no-interceptor path) and headers carried with a
run to its activities and children, on memory and SQLite (PostgreSQL in its pass)."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest

from pyweft import (
    ConfigurationError,
    Engine,
    InvalidArgumentError,
    QueryNotFoundError,
    RetryPolicy,
    WorkflowContext,
    activity,
    workflow,
)
from pyweft.observability import (
    ActivityInput,
    CompletionInput,
    Interceptor,
    OperationInput,
    QueryInput,
    StartInput,
    UpdateInput,
    WorkflowInput,
    current_headers,
)
from support.backends import Backend
from support.poll import eventually

seen: list[Any] = []
flaky_calls: list[int] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    seen.clear()
    flaky_calls.clear()


@activity
async def add(a: int, b: int) -> int:
    seen.append(("add sees", dict(current_headers())))
    return a + b


@activity
def threaded_headers() -> dict[str, str]:
    assert threading.current_thread().name.startswith("pyweft-activity")
    return dict(current_headers())


@activity(retry=RetryPolicy(max_attempts=3, initial_interval=0))
async def flaky() -> str:
    flaky_calls.append(1)
    if len(flaky_calls) < 3:
        raise RuntimeError("not yet")
    return "ok"


@workflow
async def child_reports(ctx: WorkflowContext) -> dict[str, str]:
    return dict(ctx.headers)


@workflow
async def pipeline(ctx: WorkflowContext, x: int) -> dict[str, Any]:
    total = await ctx.run(add, x, 1)
    await ctx.sleep(0)
    in_thread = await ctx.run(threaded_headers)
    child = await ctx.start_child(child_reports)
    return {"total": total, "wf": dict(ctx.headers), "thread": in_thread, "child": child}


class Recorder(Interceptor):
    def __init__(self, tag: str) -> None:
        self.tag = tag

    async def start(self, input: StartInput, next: Callable[[StartInput], Awaitable[str]]) -> str:
        seen.append((self.tag, "start", input.workflow_type))
        input.headers[f"by-{self.tag}"] = "yes"
        return await next(input)

    async def execute_workflow(
        self, input: WorkflowInput, next: Callable[[WorkflowInput], Awaitable[Any]]
    ) -> Any:
        seen.append((self.tag, "workflow", input.workflow_type, input.resumed))
        try:
            return await next(input)
        finally:
            seen.append((self.tag, "workflow returned"))

    async def operation(
        self, input: OperationInput, next: Callable[[OperationInput], Awaitable[Any]]
    ) -> Any:
        seen.append((self.tag, "op", input.kind, input.name, input.step))
        return await next(input)

    async def execute_activity(
        self, input: ActivityInput, next: Callable[[ActivityInput], Awaitable[Any]]
    ) -> Any:
        seen.append((self.tag, "activity", input.activity, input.attempt))
        return await next(input)

    def workflow_completed(self, input: CompletionInput) -> None:
        seen.append((self.tag, "completed", input.workflow_type, input.status))


async def test_first_interceptor_is_outermost_on_every_hook(backend: Backend) -> None:
    async with backend.engine(
        workflows=[pipeline, child_reports], interceptors=[Recorder("a"), Recorder("b")]
    ) as engine:
        handle = await engine.start(pipeline, 1, id="p1", headers={"tenant": "t1"})
        result = await handle.result(timeout=5)
    tagged = [s for s in seen if s[0] in ("a", "b")]
    assert tagged[:2] == [("a", "start", "pipeline"), ("b", "start", "pipeline")]
    assert tagged[2:4] == [
        ("a", "workflow", "pipeline", False),
        ("b", "workflow", "pipeline", False),
    ]
    assert tagged[4:8] == [
        ("a", "op", "activity", "add", 1),
        ("b", "op", "activity", "add", 1),
        ("a", "activity", "add", 1),
        ("b", "activity", "add", 1),
    ]
    assert ("a", "op", "sleep", "", 2) in tagged
    assert ("a", "op", "child", "child_reports", 4) in tagged
    ends = [s for s in tagged if s[1] == "workflow returned"]
    assert ends[-2:] == [("b", "workflow returned"), ("a", "workflow returned")]
    assert ("a", "completed", "pipeline", "completed") in tagged
    assert ("b", "completed", "child_reports", "completed") in tagged
    headers = {"tenant": "t1", "by-a": "yes", "by-b": "yes"}
    assert result == {"total": 2, "wf": headers, "thread": headers, "child": headers}
    assert ("add sees", headers) in seen


@workflow
async def shapes(ctx: WorkflowContext) -> list[str]:
    op = ctx.run(add, 1, 1)
    kind = type(op).__name__
    await op
    return [kind]


async def test_without_interceptors_operations_are_not_wrapped(backend: Backend) -> None:
    class OnlyCompletion(Interceptor):
        def workflow_completed(self, input: CompletionInput) -> None:
            seen.append(input.status)

    async with backend.engine(workflows=[shapes]) as engine:
        assert engine._core.services_or_raise().interceptors is None
        assert await (await engine.start(shapes)).result(timeout=5) == ["coroutine"]
    # An interceptor that does not override operation() leaves operations unwrapped too.
    async with backend.engine(workflows=[shapes], interceptors=[OnlyCompletion()]) as engine:
        assert await (await engine.start(shapes)).result(timeout=5) == ["coroutine"]
    assert [s for s in seen if s == "completed"] == ["completed"]


@workflow
async def retrying(ctx: WorkflowContext) -> str:
    return str(await ctx.run(flaky))


async def test_activity_interceptor_sees_each_attempt(backend: Backend) -> None:
    async with backend.engine(workflows=[retrying], interceptors=[Recorder("a")]) as engine:
        assert await (await engine.start(retrying)).result(timeout=5) == "ok"
    attempts = [s[3] for s in seen if s[:2] == ("a", "activity")]
    assert attempts == [1, 2, 3]


@workflow
async def adder(ctx: WorkflowContext) -> int:
    return await ctx.run(add, 1, 2)


async def test_activity_interceptor_may_change_arguments(backend: Backend) -> None:
    class Doubling(Interceptor):
        async def execute_activity(
            self, input: ActivityInput, next: Callable[[ActivityInput], Awaitable[Any]]
        ) -> Any:
            return await next(replace(input, args=tuple(2 * a for a in input.args)))

    async with backend.engine(workflows=[adder], interceptors=[Doubling()]) as engine:
        assert await (await engine.start(adder)).result(timeout=5) == 6


@workflow
async def chatty(ctx: WorkflowContext) -> int:
    count = {"n": 0}

    def bump(by: int) -> int:
        count["n"] += by
        return count["n"]

    ctx.on_query("count", lambda: count["n"])
    ctx.on_update("bump", bump)
    await ctx.wait_for_signal("stop")
    return count["n"]


async def test_query_and_update_interceptors_wrap_handlers(backend: Backend) -> None:
    class Inbound(Interceptor):
        def handle_query(self, input: QueryInput, next: Callable[[QueryInput], Any]) -> Any:
            seen.append(("query", input.name))
            return next(input)

        def handle_update(self, input: UpdateInput, next: Callable[[UpdateInput], Any]) -> Any:
            seen.append(("update", input.name, input.args, input.replaying))
            return next(replace(input, args=(input.args[0] * 10,)))

    async with backend.engine(workflows=[chatty], interceptors=[Inbound()]) as engine:
        handle = await engine.start(chatty, id="c1")
        await eventually(lambda: engine.is_running_here("c1"), what="running")
        assert await engine.update("c1", "bump", 2, timeout=5) == 20
        assert await engine.query("c1", "count") == 20
        await engine.signal("c1", "stop")
        assert await handle.result(timeout=5) == 20
    assert ("update", "bump", (2,), False) in seen
    assert ("query", "count") in seen


@workflow
async def racer(ctx: WorkflowContext) -> Any:
    return await ctx.race(ctx.run(add, 1, 1), ctx.sleep(3600))


async def test_wrapped_operations_still_work_as_race_branches(backend: Backend) -> None:
    async with backend.engine(workflows=[racer], interceptors=[Recorder("a")]) as engine:
        assert await (await engine.start(racer)).result(timeout=5) == 2
    kinds = [s[2] for s in seen if s[:2] == ("a", "op")]
    assert kinds == ["race", "activity", "sleep"]  # the race is awaited first


async def test_a_failing_completion_hook_does_not_change_the_run(backend: Backend) -> None:
    class Broken(Interceptor):
        def workflow_completed(self, input: CompletionInput) -> None:
            raise RuntimeError("tracker down")

    async with backend.engine(workflows=[adder], interceptors=[Broken()]) as engine:
        handle = await engine.start(adder)
        assert await handle.result(timeout=5) == 3
        assert (await handle.describe()).status == "completed"


@pytest.mark.parametrize(
    ("headers", "fragment"),
    [
        ({"n": 1}, "must be a string"),
        ({"": "x"}, "non-empty string"),
        ("tenant=1", "must be a mapping"),
        ({f"h{i}": "v" for i in range(65)}, "the limit is 64"),
        ({"big": "x" * 9000}, "the limit is 8192"),
    ],
)
async def test_bad_headers_are_refused_and_nothing_is_stored(
    backend: Backend, headers: Any, fragment: str
) -> None:
    async with backend.engine(workflows=[adder]) as engine:
        with pytest.raises(InvalidArgumentError, match=fragment):
            await engine.start(adder, id="h1", headers=headers)
        assert (await engine.list()).items == []


@pytest.mark.parametrize("bad", [Recorder("a"), [Recorder], [object()], "x"])
def test_bad_interceptors_are_a_configuration_error(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="Interceptor"):
        Engine("memory://", interceptors=bad)


@workflow
async def sleeper(ctx: WorkflowContext) -> dict[str, Any]:
    await ctx.sleep(60)
    return {"wf": dict(ctx.headers), "activity": await ctx.run(threaded_headers)}


async def test_headers_survive_a_restart(backend: Backend) -> None:
    async with backend.engine(workflows=[sleeper]) as engine:
        await engine.start(sleeper, id="s1", headers={"request-id": "r-9"})
        await eventually(lambda: backend.clock.pending_timers() == 1, what="sleep armed")
    async with backend.engine(workflows=[sleeper], interceptors=[Recorder("a")]) as engine:
        await eventually(lambda: backend.clock.pending_timers() == 1, what="sleep re-armed")
        backend.clock.advance(60)
        result = await engine.get_handle("s1").result(timeout=5)
    assert result == {"wf": {"request-id": "r-9"}, "activity": {"request-id": "r-9"}}
    assert ("a", "workflow", "sleeper", True) in seen


@dataclass
class Point:
    x: int
    y: int


@workflow
async def typed_handlers(ctx: WorkflowContext) -> list[str]:
    seen_types: list[str] = []

    def lookup(p: Point) -> str:
        seen_types.append(type(p).__name__)
        return f"{p.x},{p.y}"

    def move(p: Point) -> int:
        seen_types.append(type(p).__name__)
        return p.x + p.y

    ctx.on_query("lookup", lookup)
    ctx.on_update("move", move)
    await ctx.wait_for_signal("stop")
    return seen_types


async def test_wrapped_handlers_still_decode_to_their_annotated_types(backend: Backend) -> None:
    class Passing(Interceptor):
        def handle_query(self, input: QueryInput, next: Callable[[QueryInput], Any]) -> Any:
            return next(input)

        def handle_update(self, input: UpdateInput, next: Callable[[UpdateInput], Any]) -> Any:
            return next(input)

    async with backend.engine(workflows=[typed_handlers], interceptors=[Passing()]) as engine:
        handle = await engine.start(typed_handlers, id="t1")
        await eventually(lambda: engine.is_running_here("t1"), what="running")

        async def answered() -> bool:
            try:
                return await engine.query("t1", "lookup", Point(1, 2)) == "1,2"
            except QueryNotFoundError:
                return False

        await eventually(answered, what="the query handler")
        assert await engine.update("t1", "move", Point(3, 4), timeout=5) == 7
        await engine.signal("t1", "stop")
        assert await handle.result(timeout=5) == ["Point", "Point"]
