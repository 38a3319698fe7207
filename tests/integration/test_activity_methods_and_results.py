"""Activities as methods of an object, results that break their annotation, and activity logs."""

from __future__ import annotations

import logging
import threading

import pytest

from pyweft import (
    ActivityError,
    RetryPolicy,
    WorkflowContext,
    WorkflowFailedError,
    activity,
    workflow,
)
from pyweft.engine.steps.activity_scope import ActivityLogFilter, activity_log, current_activity
from support.backends import Backend
from support.poll import eventually


class Shop:
    """Activities that share one connection-like object, the usual reason for methods."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.calls: list[str] = []

    @activity
    async def reserve(self, sku: str) -> str:
        self.calls.append(f"reserve {sku}")
        return f"{self.prefix}-{sku}"

    @activity(retry=RetryPolicy(max_attempts=2))
    def ship(self, sku: str) -> str:  # plain def: runs in a worker thread
        self.calls.append(f"ship {sku}")
        return f"{self.prefix}-shipped-{sku}"

    def plain(self, sku: str) -> str:  # not decorated at all
        return f"{self.prefix}-plain-{sku}"


shop = Shop("db1")


@workflow
async def by_reference(ctx: WorkflowContext, sku: str) -> list[str]:
    return [
        await ctx.run(shop.reserve, sku),
        await ctx.run(shop.ship, sku),
        await ctx.run(shop.plain, sku),
    ]


@workflow
async def by_name(ctx: WorkflowContext, sku: str) -> list[str]:
    return [await ctx.run("reserve", sku), await ctx.run("ship", sku)]


async def test_activity_methods_run_bound_to_their_object_by_reference(backend: Backend) -> None:
    shop.calls.clear()
    async with backend.engine(workflows=[by_reference]) as engine:
        handle = await engine.start(by_reference, "A1")
        assert await handle.result(timeout=5) == ["db1-A1", "db1-shipped-A1", "db1-plain-A1"]
    assert shop.calls == ["reserve A1", "ship A1"]


async def test_activity_methods_registered_as_bound_methods_run_by_name(backend: Backend) -> None:
    other = Shop("db2")
    async with backend.engine(
        workflows=[by_name], activities=[other.reserve, other.ship]
    ) as engine:
        handle = await engine.start(by_name, "B2")
        assert await handle.result(timeout=5) == ["db2-B2", "db2-shipped-B2"]
    assert other.calls == ["reserve B2", "ship B2"]


class Mailer:
    def __init__(self, sender: str) -> None:
        self.sender = sender

    async def send(self, to: str) -> str:
        return f"{self.sender} -> {to}"


mailer_send = activity(name="send_mail", retry=RetryPolicy(max_attempts=1))(
    Mailer("shop@example.com").send
)


@workflow
async def mails(ctx: WorkflowContext) -> list[str]:
    return [await ctx.run(mailer_send, "ada"), await ctx.run("send_mail", "bo")]


async def test_decorating_a_bound_method_makes_an_activity_of_it(backend: Backend) -> None:
    async with backend.engine(workflows=[mails], activities=[mailer_send]) as engine:
        handle = await engine.start(mails)
        assert await handle.result(timeout=5) == [
            "shop@example.com -> ada",
            "shop@example.com -> bo",
        ]


# --- results that do not match the annotation -----------------------------------------


@activity
async def lookup_name(user_id: int) -> str:
    return None  # type: ignore[return-value]  # the bug this test is about


@workflow
async def greets(ctx: WorkflowContext) -> str:
    await ctx.run(shop.reserve, "warm-up")
    return await ctx.run(lookup_name, 7)


async def test_a_result_that_breaks_its_annotation_names_the_activity_and_step(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[greets]) as engine:
        handle = await engine.start(greets)
        with pytest.raises(WorkflowFailedError) as caught:
            await handle.result(timeout=5)
        steps = await handle.history()
    message = str(caught.value)
    assert "activity 'lookup_name' (step 2)" in message
    assert "return annotation" in message and "`str`" in message
    assert [(s.name, s.status) for s in steps] == [
        ("reserve", "completed"),
        ("lookup_name", "failed"),
    ]
    assert steps[1].error is not None and steps[1].error.type == "PayloadError"


@workflow
async def catches_bad_result(ctx: WorkflowContext) -> str:
    try:
        return await ctx.run(lookup_name, 7)
    except ActivityError as err:
        return f"{err.activity_name} step {err.step}: {err.error_type}"


async def test_the_workflow_can_catch_a_bad_result_as_an_activity_error(backend: Backend) -> None:
    async with backend.engine(workflows=[catches_bad_result]) as engine:
        handle = await engine.start(catches_bad_result)
        assert await handle.result(timeout=5) == "lookup_name step 1: PayloadError"


# --- log records carry the attempt ------------------------------------------------------


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.addFilter(ActivityLogFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


user_log = logging.getLogger("tests.activity_user_code")
tries = {"n": 0}


@activity(retry=RetryPolicy(max_attempts=3, initial_interval=5))
def flaky_sync(order: str) -> str:
    tries["n"] += 1
    user_log.warning("charging %s in %s", order, threading.current_thread().name)
    if tries["n"] == 1:
        raise RuntimeError("gateway hiccup")
    return order


@activity
async def async_logs(order: str) -> str:
    activity_log().info("shipping %s", order)
    scope = current_activity()
    assert scope is not None
    return f"{scope.activity}@{scope.step}#{scope.attempt}"


@workflow
async def logs(ctx: WorkflowContext) -> str:
    await ctx.run(flaky_sync, "o-1")
    return await ctx.run(async_logs, "o-1")


async def test_activity_log_records_carry_workflow_id_step_and_attempt(backend: Backend) -> None:
    tries["n"] = 0
    handler = Collect()
    for name in ("tests.activity_user_code", "pyweft"):
        logging.getLogger(name).addHandler(handler)
    logging.getLogger("pyweft").setLevel(logging.INFO)
    try:
        async with backend.engine(workflows=[logs]) as engine:
            handle = await engine.start(logs, id="logs-1")
            await eventually(lambda: backend.clock.pending_timers() == 1, what="the backoff")
            backend.clock.advance(5)
            assert await handle.result(timeout=5) == "async_logs@2#1"
    finally:
        for name in ("tests.activity_user_code", "pyweft"):
            logging.getLogger(name).removeHandler(handler)
        logging.getLogger("pyweft").setLevel(logging.NOTSET)

    def tagged(r: logging.LogRecord) -> tuple[object, ...]:
        return (r.getMessage().split(" in ")[0], getattr(r, "workflow_id", None),
                getattr(r, "activity", None), getattr(r, "step", None),
                getattr(r, "attempt", None))  # fmt: skip

    seen = [tagged(r) for r in handler.records if r.name != "pyweft.workflow"]
    assert ("charging o-1", "logs-1", "flaky_sync", 1, 1) in seen  # user code, worker thread
    assert ("charging o-1", "logs-1", "flaky_sync", 1, 2) in seen
    assert ("shipping o-1", "logs-1", "async_logs", 2, 1) in seen  # activity_log()
    retried = [r for r in handler.records if r.name == "pyweft.activities"]
    assert [(getattr(r, "step", None), getattr(r, "attempt", None)) for r in retried] == [(1, 1)]
