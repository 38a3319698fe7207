"""Human review decisions, lifecycle events and history."""

from __future__ import annotations

import asyncio

import pytest

from pyweft import (
    InvalidArgumentError,
    ReviewAlreadyDecidedError,
    ReviewNotFoundError,
    ReviewTimeoutError,
    WorkflowContext,
    WorkflowEvent,
    activity,
    workflow,
)
from support.backends import Backend
from support.poll import eventually


@workflow
async def publish(ctx: WorkflowContext, text: str) -> str:
    try:
        decision = await ctx.review(
            {"text": text}, review_type="copy", reviewers=["ed"], timeout="2d"
        )
    except ReviewTimeoutError:
        return "expired"
    return f"{decision.decision} by {decision.reviewer}: {decision.feedback}"


async def pending_review(engine: object, workflow_id: str) -> str:
    async def one() -> bool:
        return bool(await engine.list_reviews(workflow_id=workflow_id))  # type: ignore[attr-defined]

    await eventually(one, what="review requested")
    [review] = await engine.list_reviews(workflow_id=workflow_id)  # type: ignore[attr-defined]
    return str(review.review_id)


async def test_review_decision_resumes_the_workflow(backend: Backend) -> None:
    async with backend.engine(workflows=[publish]) as engine:
        handle = await engine.start(publish, "hello")
        review_id = await pending_review(engine, handle.id)
        [info] = await engine.list_reviews(review_type="copy")
        assert info.artifact == {"text": "hello"} and info.reviewers == ["ed"]
        await engine.submit_review(review_id, "approved", reviewer="ed", feedback="ship it")
        assert await handle.result(timeout=5) == "approved by ed: ship it"
        assert await engine.list_reviews() == []
        [done] = await engine.list_reviews(status="approved")
        assert done.reviewer == "ed"


async def test_decision_is_durable_and_not_asked_twice_after_restart(backend: Backend) -> None:
    async with backend.engine(workflows=[publish], recover=False) as engine:
        await engine.start(publish, "x", id="pub")
        review_id = await pending_review(engine, "pub")
    async with backend.engine(workflows=[publish], recover=False) as engine:
        await engine.submit_review(review_id, "rejected", reviewer="ann")  # no engine drives it
    async with backend.engine(workflows=[publish]) as engine:
        assert await engine.get_handle("pub").result(timeout=5) == "rejected by ann: None"
        all_reviews = await engine.list_reviews(status=None)
    assert len(all_reviews) == 1  # the restart did not request a second review


async def test_second_decision_and_unknown_review_are_rejected(backend: Backend) -> None:
    async with backend.engine(workflows=[publish]) as engine:
        handle = await engine.start(publish, "x")
        review_id = await pending_review(engine, handle.id)
        await engine.submit_review(review_id, "needs_changes", reviewer="ed")
        with pytest.raises(ReviewAlreadyDecidedError) as err:
            await engine.submit_review(review_id, "approved", reviewer="bob")
        assert err.value.status == "needs_changes"
        assert await handle.result(timeout=5) == "needs_changes by ed: None"
        before = await engine.storage.scan("")
        with pytest.raises(ReviewNotFoundError):
            await engine.submit_review("nope", "approved", reviewer="bob")
        with pytest.raises(InvalidArgumentError):
            await engine.submit_review(review_id, "maybe", reviewer="bob")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            await engine.submit_review(review_id, "approved", reviewer="")
        assert await engine.storage.scan("") == before


async def test_review_timeout_raises_in_the_workflow(backend: Backend) -> None:
    async with backend.engine(workflows=[publish]) as engine:
        handle = await engine.start(publish, "x")
        await pending_review(engine, handle.id)
        await eventually(lambda: backend.clock.pending_timers() == 1, what="timeout armed")
        backend.clock.advance(2 * 86400)
        assert await handle.result(timeout=5) == "expired"
        [expired] = await engine.list_reviews(status="expired")
        with pytest.raises(ReviewAlreadyDecidedError):
            await engine.submit_review(expired.review_id, "approved", reviewer="late")


async def test_escalation_can_auto_approve(backend: Backend) -> None:
    @workflow(name="escalating")
    async def escalating(ctx: WorkflowContext) -> str:
        decision = await ctx.review(
            "doc",
            escalation=[{"after": "1h", "to": ["lead"]}, {"after": "1d", "action": "auto-approve"}],
        )
        return f"{decision.decision}/{decision.reviewer}"

    async with backend.engine(workflows=[escalating]) as engine:
        handle = await engine.start(escalating)
        await pending_review(engine, handle.id)
        await eventually(lambda: backend.clock.pending_timers() == 1, what="escalation armed")
        backend.clock.advance(3600)

        async def reassigned() -> bool:
            reviews = await engine.list_reviews(workflow_id=handle.id)
            return bool(reviews) and reviews[0].reviewers == ["lead"]

        await eventually(reassigned, what="reassigned to lead")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="next escalation")
        backend.clock.advance(86400)
        assert await handle.result(timeout=5) == "approved/escalation:auto-approve"


@activity
async def step_one() -> int:
    return 1


@workflow
async def eventful(ctx: WorkflowContext) -> int:
    await ctx.run(step_one)
    await ctx.wait_for_signal("go")
    return 2


async def test_events_stream_lifecycle_in_order(backend: Backend) -> None:
    async with backend.engine(workflows=[eventful]) as engine:
        seen: list[WorkflowEvent] = []

        async def consume() -> None:
            async for event in engine.events():
                seen.append(event)
                if event.kind == "completed":
                    return

        consumer = asyncio.ensure_future(consume())
        await asyncio.sleep(0)
        handle = await engine.start(eventful)
        run_events = handle.events()
        await eventually(lambda: any(e.kind == "step_completed" for e in seen), what="step")
        await handle.signal("go", 1)
        await asyncio.wait_for(consumer, 5)
        kinds = [e.kind for e in seen]
        assert kinds == [
            "started",
            "step_completed",
            "signal_received",
            "step_completed",
            "completed",
        ]
        assert all(e.workflow_id == handle.id for e in seen)
        history = await handle.history()
        assert [e.kind for e in history.events] == [
            "created",
            "step_completed",
            "step_completed",
            "completed",
        ]
        await run_events.aclose()  # type: ignore[attr-defined]


async def test_an_event_stream_buffers_from_the_moment_it_is_made(backend: Backend) -> None:
    async with backend.engine(workflows=[eventful]) as engine:
        everything = engine.events()  # subscribed now, though nobody iterates yet
        handle = await engine.start(eventful)
        mine = handle.events()
        await handle.signal("go", 1)
        assert await handle.result(timeout=5) == 2
        kinds = [event.kind async for event in mine]  # ends after the terminal event
        assert kinds == ["step_completed", "signal_received", "step_completed", "completed"]
        assert (await anext(everything)).kind == "started"
        await everything.aclose()
        assert [event async for event in everything] == []
        assert not engine._core.events.active  # both streams let go of their buffers
