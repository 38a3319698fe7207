"""The pytest plugin's fixtures, used as a user's test suite would."""

from __future__ import annotations

import pytest

from pyweft import Engine, WorkflowContext, activity, workflow
from pyweft.testing import FaultyStorage, TestEnv


@activity
async def greet(name: str) -> str:
    return f"hello {name}"


@workflow
async def greeter(ctx: WorkflowContext, name: str) -> str:
    await ctx.sleep("7 days")
    return await ctx.run(greet, name)


@pytest.mark.pyweft(workflows=[greeter], auto_advance=True)
async def test_pyweft_env_is_an_open_test_env_configured_by_the_marker(
    pyweft_env: TestEnv, pyweft_engine: Engine
) -> None:
    assert pyweft_engine is pyweft_env.engine
    greet_mock = pyweft_env.mock(greet, returns="hi")
    handle = await pyweft_env.start(greeter, "ada")
    assert await pyweft_env.result(handle) == "hi"
    assert greet_mock.calls[0].args == ("ada",)
    info = await pyweft_env.wait_for(handle, status="completed")
    assert info.step_count == 2


async def test_pyweft_faulty_storage_injects_faults(pyweft_faulty_storage: FaultyStorage) -> None:
    pyweft_faulty_storage.fail_nth_read(1)
    with pytest.raises(Exception, match="injected"):
        async with Engine(pyweft_faulty_storage, workflows=[greeter]):
            pass
    assert pyweft_faulty_storage.counts.read_failures == 1
