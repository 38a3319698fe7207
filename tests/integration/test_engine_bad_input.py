"""Bad input gets a typed error at the boundary and changes nothing stored."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from pyweft import (
    ActivityNotRegisteredError,
    ConfigurationError,
    DefinitionError,
    Engine,
    InvalidArgumentError,
    InvalidDurationError,
    PayloadError,
    PyweftError,
    RetryPolicy,
    WorkflowAlreadyExistsError,
    WorkflowContext,
    WorkflowFailedError,
    WorkflowNotFoundError,
    WorkflowNotRegisteredError,
    activity,
    workflow,
)
from pyweft.storage.sqlite import SQLiteStorage
from support.backends import Backend
from support.poll import eventually


@workflow
async def echo(ctx: WorkflowContext, value: object) -> object:
    return value


@workflow
async def calls_missing(ctx: WorkflowContext) -> None:
    await ctx.run("no_such_activity")


@workflow
async def bad_sleep(ctx: WorkflowContext) -> None:
    await ctx.sleep("soon")


@workflow
async def bad_result(ctx: WorkflowContext) -> object:
    return object()


async def snapshot(engine: Engine) -> list[tuple[str, bytes]]:
    return await engine.storage.scan("")


def assert_code(err: PyweftError, cls: type[PyweftError]) -> None:
    assert isinstance(err, cls)
    assert err.code == cls.__name__


async def test_unknown_workflow_name_is_rejected(backend: Backend) -> None:
    async with backend.engine(workflows=[echo]) as engine:
        before = await snapshot(engine)
        with pytest.raises(WorkflowNotRegisteredError) as err:
            await engine.start("nope", 1)
        assert_code(err.value, WorkflowNotRegisteredError)
        assert "echo" in str(err.value)  # lists what is registered
        assert await snapshot(engine) == before


async def test_unregistered_workflow_function_is_rejected(backend: Backend) -> None:
    @workflow(name="stranger")
    async def stranger(ctx: WorkflowContext) -> None:
        return None

    async with backend.engine(workflows=[echo]) as engine:
        before = await snapshot(engine)
        with pytest.raises(WorkflowNotRegisteredError):
            await engine.start(stranger)
        assert await snapshot(engine) == before


async def test_unencodable_argument_names_its_path(backend: Backend) -> None:
    async with backend.engine(workflows=[echo]) as engine:
        before = await snapshot(engine)
        with pytest.raises(PayloadError) as err:
            await engine.start(echo, {"items": [1, {"price": object()}]})
        assert_code(err.value, PayloadError)
        assert err.value.path == 'args[0]["items"][1]["price"]' or "price" in err.value.path
        assert await snapshot(engine) == before


async def test_oversized_argument_is_rejected_before_any_write(backend: Backend) -> None:
    async with backend.engine(workflows=[echo], max_payload_bytes=1000) as engine:
        before = await snapshot(engine)
        with pytest.raises(PayloadError) as err:
            await engine.start(echo, "x" * 2000)
        assert "max_payload_bytes" in str(err.value)
        assert await snapshot(engine) == before


async def test_invalid_durations_are_rejected(backend: Backend) -> None:
    with pytest.raises(InvalidDurationError) as err:
        RetryPolicy(initial_interval="fast")
    assert_code(err.value, InvalidDurationError)
    async with backend.engine(workflows=[echo, bad_sleep]) as engine:
        handle = await engine.start(echo, 1)
        assert await handle.result(timeout=5) == 1
        before = await snapshot(engine)
        with pytest.raises(InvalidDurationError):
            await handle.result(timeout="soon")
        assert await snapshot(engine) == before
        # Inside a workflow the error fails the run without recording a step.
        sleeper = await engine.start(bad_sleep)
        with pytest.raises(WorkflowFailedError) as failed:
            await sleeper.result(timeout=5)
        assert failed.value.error_type == "InvalidDurationError"
        assert (await sleeper.describe()).step_count == 0


async def test_unregistered_activity_fails_the_run_with_a_typed_error(backend: Backend) -> None:
    async with backend.engine(workflows=[calls_missing]) as engine:
        handle = await engine.start(calls_missing)
        with pytest.raises(WorkflowFailedError) as err:
            await handle.result(timeout=5)
        info = await handle.describe()
    assert err.value.error_type == "ActivityNotRegisteredError"
    assert info.error is not None and info.error.code == ActivityNotRegisteredError.__name__
    assert info.step_count == 0


async def test_unencodable_workflow_result_fails_the_run(backend: Backend) -> None:
    async with backend.engine(workflows=[bad_result]) as engine:
        handle = await engine.start(bad_result)
        with pytest.raises(WorkflowFailedError) as err:
            await handle.result(timeout=5)
    assert err.value.error_type == "PayloadError"


async def test_bad_storage_url_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError) as err:
        Engine("ftp://example/db")
    assert_code(err.value, ConfigurationError)
    assert "sqlite:///" in str(err.value)


async def test_result_of_unknown_id_is_not_found(backend: Backend) -> None:
    async with backend.engine(workflows=[echo]) as engine:
        before = await snapshot(engine)
        with pytest.raises(WorkflowNotFoundError) as err:
            await engine.get_handle("ghost").result(timeout=1)
        assert_code(err.value, WorkflowNotFoundError)
        assert err.value.workflow_id == "ghost"
        with pytest.raises(WorkflowNotFoundError):
            await engine.describe("ghost")
        with pytest.raises(WorkflowNotFoundError):
            await engine.cancel("ghost")
        assert await snapshot(engine) == before


async def test_invalid_ids_limits_and_cursors_are_rejected(backend: Backend) -> None:
    async with backend.engine(workflows=[echo]) as engine:
        before = await snapshot(engine)
        with pytest.raises(InvalidArgumentError):
            await engine.start(echo, 1, id="")
        with pytest.raises(InvalidArgumentError):
            await engine.start(echo, 1, id="x" * 300)
        with pytest.raises(InvalidArgumentError):
            await engine.start(echo, 1, id="a", idempotency_key="b")
        with pytest.raises(InvalidArgumentError):
            await engine.start(echo, 1, on_conflict="replace")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            await engine.list(limit=0)
        with pytest.raises(InvalidArgumentError):
            await engine.list(status="sleeping")
        with pytest.raises(InvalidArgumentError):
            await engine.list(cursor="not-a-cursor")
        assert await snapshot(engine) == before


async def test_engine_refuses_calls_before_it_is_entered(backend: Backend) -> None:
    from pyweft import EngineClosedError

    engine = backend.engine(workflows=[echo])
    with pytest.raises(EngineClosedError):
        await engine.start(echo, 1)
    async with engine:
        pass
    with pytest.raises(EngineClosedError):
        await engine.start(echo, 1)


# --- times and durations (issue 9 §6) -------------------------------------------------

BAD_TIMES = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "1e300": 1e300}


@workflow
async def sleeps_until(ctx: WorkflowContext, which: str) -> str:
    await ctx.sleep_until(BAD_TIMES[which])
    return "woke"


@pytest.mark.parametrize("which", list(BAD_TIMES))
async def test_sleep_until_a_time_no_date_can_hold_fails_the_run_and_records_no_step(
    backend: Backend, which: str
) -> None:
    async with backend.engine(workflows=[sleeps_until]) as engine:
        handle = await engine.start(sleeps_until, which)
        with pytest.raises(WorkflowFailedError) as err:
            await handle.result(timeout=5)  # not "woke": nan no longer returns at once
        assert err.value.error_type == "InvalidDurationError"
        assert "between the years 1 and 9999" in err.value.error_message
        assert (await handle.describe()).step_count == 0
        history = await engine.history(handle.id)  # readers never meet the bad time
        assert history.steps == []


@pytest.mark.parametrize(
    "options",
    [
        {"start_at": math.nan},
        {"start_at": math.inf},
        {"start_at": -math.inf},
        {"start_at": 1e300},
        {"start_at": 253_402_300_800},  # the first second of year 10000
        {"start_delay": math.nan},
        {"start_delay": 1e300},
        {"start_delay": "36526d"},
        {"execution_timeout": math.inf},
        {"execution_timeout": 1e300},
    ],
    ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()),
)
async def test_start_times_and_delays_out_of_range_are_refused_and_store_nothing(
    backend: Backend, options: dict[str, Any]
) -> None:
    async with backend.engine(workflows=[echo]) as engine:
        before = await snapshot(engine)
        with pytest.raises((InvalidArgumentError, InvalidDurationError)) as err:
            await engine.start(echo, 1, id="timed", **options)
        assert next(iter(options)) in str(err.value)
        assert await snapshot(engine) == before


async def test_time_filters_and_wait_timeouts_out_of_range_are_refused(backend: Backend) -> None:
    async with backend.engine(workflows=[echo]) as engine:
        handle = await engine.start(echo, 1)
        await handle.result(timeout=5)
        before = await snapshot(engine)
        for bound in ("created_after", "created_before", "updated_after", "updated_before"):
            for value in (math.nan, math.inf):
                with pytest.raises(InvalidArgumentError, match=bound):
                    await engine.list(**{bound: value})
        with pytest.raises(InvalidDurationError, match="timeout"):
            await handle.result(timeout=math.nan)
        with pytest.raises(InvalidDurationError, match="timeout"):
            await engine.update(handle.id, "add", 1, timeout=1e300)
        assert await snapshot(engine) == before


async def test_out_of_range_retention_is_a_configuration_error() -> None:
    for value in (math.nan, math.inf, 1e300, "36526d"):
        with pytest.raises((ConfigurationError, InvalidDurationError), match="retention"):
            Engine("memory://", retention={"completed": value})


# --- timeouts of zero -----------------------------------------------------------------


@activity
async def quick() -> str:
    return "done"


BAD_BUDGETS = {"zero": 0, "nan": math.nan, "inf": math.inf}


@workflow
async def runs_quick(ctx: WorkflowContext, option: str, which: str) -> str:
    result: str = await ctx.run(quick, **{option: BAD_BUDGETS[which]})
    return result


@pytest.mark.parametrize("option", ["timeout", "schedule_to_close"])
@pytest.mark.parametrize("which", list(BAD_BUDGETS))
async def test_ctx_run_with_a_zero_or_invalid_budget_fails_the_run_before_any_attempt(
    backend: Backend, option: str, which: str
) -> None:
    async with backend.engine(workflows=[runs_quick], activities=[quick]) as engine:
        handle = await engine.start(runs_quick, option, which)
        with pytest.raises(WorkflowFailedError) as err:
            await handle.result(timeout=5)
        assert err.value.error_type == "InvalidDurationError"
        assert option in err.value.error_message
        assert (await handle.describe()).step_count == 0


# --- conflicts with a run of another type ---------------------------------------------


@workflow
async def other_type(ctx: WorkflowContext, value: object) -> str:
    return "other"


@workflow
async def listens(ctx: WorkflowContext) -> object:
    return await ctx.wait_for_signal("go")


async def test_use_existing_refuses_a_run_of_another_workflow_type(backend: Backend) -> None:
    async with backend.engine(workflows=[echo, other_type]) as engine:
        await (await engine.start(other_type, 1, id="order-1")).result(timeout=5)
        before = await snapshot(engine)
        with pytest.raises(WorkflowAlreadyExistsError) as err:
            await engine.start(echo, 1, id="order-1", on_conflict="use_existing")
        assert_code(err.value, WorkflowAlreadyExistsError)
        assert err.value.workflow_id == "order-1"
        assert "'other_type'" in str(err.value) and "'echo'" in str(err.value)
        assert await snapshot(engine) == before
        # The same type is still handed back.
        same = await engine.start(other_type, 2, id="order-1", on_conflict="use_existing")
        assert await same.result(timeout=5) == "other"


async def test_an_idempotency_key_of_another_workflow_type_is_refused(backend: Backend) -> None:
    async with backend.engine(workflows=[echo, other_type]) as engine:
        first = await engine.start(other_type, 1, idempotency_key="req-7")
        await first.result(timeout=5)
        before = await snapshot(engine)
        with pytest.raises(WorkflowAlreadyExistsError, match="'other_type'"):
            await engine.start(echo, 1, idempotency_key="req-7")
        assert await snapshot(engine) == before
        again = await engine.start(other_type, 1, idempotency_key="req-7")
        assert again.id == first.id


async def test_start_or_signal_refuses_to_signal_a_run_of_another_type(backend: Backend) -> None:
    async with backend.engine(workflows=[listens, echo]) as engine:
        running = await engine.start(echo, 1, id="shared")
        await running.result(timeout=5)
        before = await snapshot(engine)
        with pytest.raises(WorkflowAlreadyExistsError, match="'echo'"):
            await engine.start_or_signal(listens, signal=("go", 1), id="shared")
        assert await snapshot(engine) == before  # no signal buffered for the echo run


# --- arguments that do not fit the workflow -------------------------------------------


@workflow
async def two_args(ctx: WorkflowContext, order_id: str, amount: int = 0) -> str:
    return f"{order_id}:{amount}"


async def test_start_binds_arguments_before_storing_and_keeps_the_id_usable(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[two_args, listens]) as engine:
        before = await snapshot(engine)
        with pytest.raises(InvalidArgumentError, match="missing a required argument: 'order_id'"):
            await engine.start(two_args, id="pay-1")
        with pytest.raises(InvalidArgumentError, match="too many positional arguments") as err:
            await engine.start(two_args, "o", 1, "extra", id="pay-1")
        assert "(order_id: str, amount: int = 0)" in str(err.value)
        with pytest.raises(InvalidArgumentError, match="too many positional arguments"):
            await engine.start_or_signal(listens, "extra", signal=("go", 1), id="pay-1")
        assert await snapshot(engine) == before
        handle = await engine.start(two_args, "o", id="pay-1")  # the id was not used up
        assert await handle.result(timeout=5) == "o:0"


# --- definitions handed to the engine -------------------------------------------------


async def test_engine_refuses_activities_as_workflows_and_workflows_as_activities() -> None:
    with pytest.raises(DefinitionError, match=r"quick is an @activity, not a workflow"):
        Engine("memory://", workflows=[quick])
    with pytest.raises(DefinitionError, match=r"echo is a @workflow, not an activity"):
        Engine("memory://", activities=[echo])
    with pytest.raises(ConfigurationError, match=r"workflows=\[echo\]"):
        Engine("memory://", workflows=echo)  # type: ignore[arg-type]


@workflow
async def starts_an_activity(ctx: WorkflowContext) -> object:
    return await ctx.start_child(quick)


async def test_starting_an_activity_as_a_workflow_says_so_and_stores_nothing(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[starts_an_activity], activities=[quick]) as engine:
        before = await snapshot(engine)
        with pytest.raises(DefinitionError, match="quick, which is an @activity"):
            await engine.start(quick)
        with pytest.raises(DefinitionError, match="quick, which is an @activity"):
            await engine.start_or_signal(quick, signal=("go", 1))
        assert await snapshot(engine) == before
        handle = await engine.start(starts_an_activity)
        with pytest.raises(WorkflowFailedError) as err:
            await handle.result(timeout=5)
        assert err.value.error_type == "DefinitionError"
        assert "ctx.run" in err.value.error_message
        assert (await handle.describe()).step_count == 0


@workflow
async def runs_a_workflow(ctx: WorkflowContext) -> object:
    return await ctx.run(echo, 1)


async def test_ctx_run_of_a_workflow_fails_the_run_with_a_definition_error(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[runs_a_workflow, echo]) as engine:
        handle = await engine.start(runs_a_workflow)
        with pytest.raises(WorkflowFailedError) as err:
            await handle.result(timeout=5)
        assert err.value.error_type == "DefinitionError"
        assert "ctx.start_child" in err.value.error_message
        assert (await handle.describe()).step_count == 0


# --- options for another store --------------------------------------------------------


async def test_sqlite_synchronous_for_a_store_that_is_not_sqlite_is_refused() -> None:
    from pyweft import MemoryStorage

    for url in ("memory://", "postgresql://nobody@127.0.0.1:1/none"):
        with pytest.raises(ConfigurationError, match="applies only to SQLite") as err:
            Engine(url, sqlite_synchronous="NORMAL")
        assert_code(err.value, ConfigurationError)
    with pytest.raises(ConfigurationError, match="set synchronous= on that adapter"):
        Engine(MemoryStorage(), sqlite_synchronous="FULL")
    async with Engine("memory://", workflows=[echo]) as engine:  # the default still works
        assert await (await engine.start(echo, 1)).result(timeout=5) == 1


async def test_sqlite_synchronous_still_applies_to_sqlite(tmp_path: Path) -> None:
    async with Engine(f"sqlite:///{tmp_path / 'a.db'}", sqlite_synchronous="NORMAL") as engine:
        assert isinstance(engine.storage, SQLiteStorage)
        assert engine.storage.synchronous == "NORMAL"


# --- fork -----------------------------------------------------------------------------


@workflow
async def two_steps(ctx: WorkflowContext) -> int:
    await ctx.run(quick)
    await ctx.run(quick)
    return 2


async def test_fork_from_a_step_the_run_never_reached_is_refused(backend: Backend) -> None:
    async with backend.engine(workflows=[two_steps], activities=[quick]) as engine:
        source = await engine.start(two_steps, id="src")
        await source.result(timeout=5)
        before = await snapshot(engine)
        with pytest.raises(InvalidArgumentError, match="last committed step is 2") as err:
            await engine.fork("src", from_step=99, id="copy")
        assert "between 0 and 2" in str(err.value)
        assert await snapshot(engine) == before
        copy = await engine.fork("src", from_step=2, id="copy")
        assert await copy.result(timeout=5) == 2


# --- readers and times stored before the boundary checks ------------------------------


@workflow
async def naps(ctx: WorkflowContext) -> None:
    await ctx.sleep("1h")


@pytest.mark.parametrize("stored", [math.inf, math.nan, 1e300, -1e300])
async def test_history_shows_a_time_stored_by_an_older_version_instead_of_crashing(
    backend: Backend, stored: float
) -> None:
    from pyweft.engine.replay import keys, records
    from pyweft.storage.base import Put
    from pyweft.storage.factory import open_storage

    async with backend.engine(workflows=[naps]) as engine:
        handle = await engine.start(naps, id="old")
        key = keys.pending("old", 1)
        await eventually(lambda: engine.storage.get(key), what="the sleep's timer")
        pending = records.decode_pending(await engine.storage.get(key) or b"")
    # What an earlier pyweft could store for ctx.sleep_until(inf) and the like.
    pending.deadline = stored
    given = backend.storage()
    storage = open_storage(given) if isinstance(given, str) else given
    await storage.batch([Put(key=key, value=records.encode(pending))])
    if storage is not given:
        await storage.close()
    async with backend.engine(workflows=[naps], recover=False) as engine:
        history = await engine.history(handle.id)
        (step,) = history.steps
        assert step.kind == "sleep"
        assert step.next_attempt_at is not None and step.next_attempt_at.year in (1, 9999)
        assert (await engine.describe(handle.id)).status == "running"
