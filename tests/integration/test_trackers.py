"""ErrorReporter: failed runs and failed activity attempts reach an error tracker with
their context (a Sentry-style stand-in that records events; no network)."""

from __future__ import annotations

from typing import Any

import pytest

from pyweft import RetryPolicy, WorkflowContext, WorkflowFailedError, activity, workflow
from pyweft.observability.trackers import ErrorReport, ErrorReporter
from support.backends import Backend

calls: list[int] = []


class FakeSentry:
    """What sentry_sdk.capture_exception / capture_message would receive."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, report: ErrorReport) -> None:
        self.events.append(
            {
                "exception": report.exception,
                "message": f"{report.error_type}: {report.message}",
                "tags": {
                    "workflow_type": report.workflow_type,
                    "failure_category": report.failure_category,
                    "activity": report.activity,
                    "tenant": report.headers.get("tenant"),
                },
                "extra": {"workflow_id": report.workflow_id, "attempt": report.attempt},
            }
        )


@pytest.fixture(autouse=True)
def _reset() -> None:
    calls.clear()


@activity(retry=RetryPolicy(max_attempts=2, initial_interval=0))
async def declines() -> None:
    calls.append(1)
    raise ValueError(f"card declined ({len(calls)})")


@workflow
async def checkout(ctx: WorkflowContext) -> None:
    await ctx.run(declines)


async def test_failures_reach_the_tracker_with_their_context(backend: Backend) -> None:
    sentry = FakeSentry()
    async with backend.engine(workflows=[checkout], interceptors=[ErrorReporter(sentry)]) as e:
        with pytest.raises(WorkflowFailedError):
            await (await e.start(checkout, id="o-1", headers={"tenant": "acme"})).result(timeout=5)
    first, second, run = sentry.events
    assert isinstance(first["exception"], ValueError)
    assert first["message"] == "ValueError: card declined (1)"
    assert first["tags"] == {
        "workflow_type": "checkout",
        "failure_category": "application",
        "activity": "declines",
        "tenant": "acme",
    }
    assert [first["extra"]["attempt"], second["extra"]["attempt"]] == [1, 2]
    assert run["exception"] is None
    assert run["tags"]["activity"] is None
    assert run["tags"]["failure_category"] == "application"
    assert run["extra"] == {"workflow_id": "o-1", "attempt": None}
    assert "card declined (2)" in run["message"]


async def test_a_broken_tracker_changes_nothing(backend: Backend) -> None:
    def broken(report: ErrorReport) -> None:
        raise ConnectionError("tracker unreachable")

    async with backend.engine(
        workflows=[checkout], interceptors=[ErrorReporter(broken, activities=True)]
    ) as e:
        with pytest.raises(WorkflowFailedError, match="card declined"):
            await (await e.start(checkout)).result(timeout=5)
    assert len(calls) == 2  # retried as usual
