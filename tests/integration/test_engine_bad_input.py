"""Bad input gets a typed error at the boundary and changes nothing stored."""

from __future__ import annotations

import pytest

from pyweft import (
    ActivityNotRegisteredError,
    ConfigurationError,
    Engine,
    InvalidArgumentError,
    InvalidDurationError,
    PayloadError,
    PyweftError,
    RetryPolicy,
    WorkflowContext,
    WorkflowFailedError,
    WorkflowNotFoundError,
    WorkflowNotRegisteredError,
    workflow,
)
from support.backends import Backend


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
