"""Log records carry the run's context (id, type, step; activity and attempt), replay
stays quiet, and JsonFormatter writes them as one JSON object each."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from pyweft import RetryPolicy, WorkflowContext, activity, workflow
from pyweft.observability.logs import ActivityLogFilter, JsonFormatter, activity_log
from support.backends import Backend
from support.poll import eventually

tries: list[int] = []


@pytest.fixture
def shipped() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ActivityLogFilter())
    loggers = [logging.getLogger(n) for n in ("pyweft.workflow", "pyweft.activity", "shop")]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    tries.clear()
    yield stream
    for logger in loggers:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)


@activity(retry=RetryPolicy(max_attempts=2, initial_interval=0))
async def pack(order: str) -> str:
    tries.append(1)
    activity_log().info("packing %s", order)
    logging.getLogger("shop").info("library record", extra={"box": 3})
    if len(tries) == 1:
        raise RuntimeError("tape ran out")
    return "packed"


@workflow
async def ship(ctx: WorkflowContext, order: str) -> str:
    ctx.log.info("shipping %s", order)
    await ctx.run(pack, order)
    await ctx.sleep(60)
    ctx.log.info("shipped %s", order, extra={"carrier": "ups"})
    return "done"


def records(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


async def test_records_carry_the_run_context_as_json(
    backend: Backend, shipped: io.StringIO
) -> None:
    async with backend.engine(workflows=[ship]) as engine:
        await engine.start(ship, "o-7", id="ship-1")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="sleep armed")
    async with backend.engine(workflows=[ship]) as engine:  # replays the first part
        await eventually(lambda: backend.clock.pending_timers() == 1, what="sleep re-armed")
        backend.clock.advance(60)
        assert await engine.get_handle("ship-1").result(timeout=5) == "done"
    got = records(shipped)
    workflow_lines = [r for r in got if r["logger"] == "pyweft.workflow"]
    assert [r["message"] for r in workflow_lines] == ["shipping o-7", "shipped o-7"]
    first, last = workflow_lines
    assert first["workflow_id"] == "ship-1" and first["workflow_type"] == "ship"
    assert (first["step"], last["step"], last["carrier"]) == (0, 2, "ups")
    packing = [r for r in got if r["message"] == "packing o-7"]
    assert [(r["activity"], r["step"], r["attempt"]) for r in packing] == [
        ("pack", 1, 1),
        ("pack", 1, 2),
    ]
    library = [r for r in got if r["logger"] == "shop"]
    assert library[0]["box"] == 3 and library[0]["workflow_id"] == "ship-1"
    assert all("attempt_token" not in r for r in got)  # tokens are not shipped by default
    assert all(isinstance(r["time"], str) and r["level"] == "INFO" for r in got)
