"""What ``pyweft conformance`` asks of a worker: three activities on queue ``conformance``.

- ``conformance.echo(value)`` returns ``value`` unchanged;
- ``conformance.sleep(ms)`` waits ``ms`` milliseconds, stopping early when the attempt
  is cancelled, and returns ``ms``;
- ``conformance.fail(message)`` fails with ``message`` as a non-retryable error.

The definitions below are the engine's view of them (their options: queue, timeouts,
retries); their bodies never run in the harness, whose engine serves no queue.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyweft import RetryPolicy, WorkflowContext, activity, workflow

QUEUE = "conformance"
ACTIVITY_NAMES = ("conformance.echo", "conformance.sleep", "conformance.fail")
ECHO_VALUE: Any = {
    "text": "h\u00e9llo \u2603",
    "numbers": [1, 2.5, -3],
    "flags": [True, False, None],
}

_QUICK_RETRY = RetryPolicy(max_attempts=3, initial_interval=0.05, max_interval=0.2)


def _elsewhere(name: str) -> str:
    return f"{name} runs on the worker under test, never in the harness's engine"


@activity(name="conformance.echo", queue=QUEUE, retry=_QUICK_RETRY)
async def echo(value: Any) -> Any:
    raise NotImplementedError(_elsewhere("conformance.echo"))


@activity(name="conformance.sleep", queue=QUEUE, retry=_QUICK_RETRY, visibility_timeout="1s")
async def sleep(ms: int) -> int:
    raise NotImplementedError(_elsewhere("conformance.sleep"))


@activity(name="conformance.fail", queue=QUEUE, retry=_QUICK_RETRY)
async def fail(message: str) -> None:
    raise NotImplementedError(_elsewhere("conformance.fail"))


@workflow(name="conformance.call_echo")
async def call_echo(ctx: WorkflowContext, value: Any) -> Any:
    return await ctx.run(echo, value)


@workflow(name="conformance.call_sleep")
async def call_sleep(ctx: WorkflowContext, ms: int) -> int:
    return await ctx.run(sleep, ms)


@workflow(name="conformance.call_fail")
async def call_fail(ctx: WorkflowContext, message: str) -> None:
    await ctx.run(fail, message)


WORKFLOWS: list[Callable[..., Any]] = [call_echo, call_sleep, call_fail]
