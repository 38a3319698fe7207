"""Bulk operations: a dry run with a confirmation token, then a commit with it.

The filter must scope the operation, the token is single-use, lapses, and binds
the operation and filter; the commit acts on each run through the engine's own
methods, skips runs that ended meanwhile, and writes an audit record.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from pyweft import (
    BulkDeleteRequiresTerminalWorkflowsError,
    BulkOperationConfirmationError,
    BulkScopeError,
    InvalidArgumentError,
    WorkflowCancelledError,
    WorkflowContext,
    WorkflowFailedError,
    workflow,
)
from pyweft.engine.bulk import TOKEN_TTL_S
from support.backends import Backend


@workflow(name="bulk_waiter")
async def waiter(ctx: WorkflowContext) -> Any:
    return await ctx.wait_for_signal("go")


@workflow(name="bulk_failer")
async def failer(ctx: WorkflowContext, fail: bool) -> str:
    if fail:
        raise ValueError("boom")
    return "ok"


async def _statuses(engine: Any, ids: list[str]) -> list[str]:
    return [(await engine.describe(i)).status for i in ids]


async def test_dry_run_changes_nothing_and_the_commit_cancels_what_matches(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[waiter, failer]) as engine:
        for i in range(5):
            await engine.start(waiter, id=f"imp-{i}")
        await engine.start(waiter, id="other-1")
        await engine.start(failer, False, id="imp-done")
        await engine.get_handle("imp-done").result(timeout=5)

        preview = await engine.bulk_preview("cancel", status="running", id_prefix="imp-")
        assert preview.matched == 5 and sorted(preview.sample) == [f"imp-{i}" for i in range(5)]
        assert preview.scope == {"status": "running", "id_prefix": "imp-"}
        assert await _statuses(engine, ["imp-0", "other-1"]) == ["running", "running"]

        result = await engine.bulk_commit(
            "cancel",
            confirmation_token=preview.confirmation_token,
            actor="ops@example.com",
            status="running",
            id_prefix="imp-",
        )
        assert (result.matched, result.applied, result.skipped, result.failed) == (5, 5, 0, {})
        for i in range(5):
            with pytest.raises(WorkflowCancelledError):
                await engine.get_handle(f"imp-{i}").result(timeout=5)
        assert await _statuses(engine, ["other-1", "imp-done"]) == ["running", "completed"]

        (audit,) = await engine.bulk_audit()
        assert audit["audit_id"] == result.audit_id
        assert (audit["operation"], audit["matched"], audit["applied"]) == ("cancel", 5, 5)
        assert audit["actor"] == "ops@example.com"
        await engine.cancel("other-1")


async def test_a_filter_must_scope_the_operation(backend: Backend) -> None:
    async with backend.engine(workflows=[waiter]) as engine:
        await engine.start(waiter, id="abc-1")
        for unscoped in ({}, {"created_after": 0.0}, {"id_prefix": "ab"}, {"parent_id": "p"}):
            with pytest.raises(BulkScopeError, match="scoped filter"):
                await engine.bulk_preview("cancel", **unscoped)
        with pytest.raises(InvalidArgumentError, match="unknown filter"):
            await engine.bulk_preview("cancel", kind="x")
        with pytest.raises(InvalidArgumentError, match="unknown bulk operation"):
            await engine.bulk_preview("terminate", id_prefix="abc")
        with pytest.raises(InvalidArgumentError, match=r"signal=\(name, payload\)"):
            await engine.bulk_preview("signal", id_prefix="abc")
        assert (await engine.bulk_preview("cancel", id_prefix="abc")).matched == 1
        assert await engine.bulk_audit() == []  # dry runs are not audited
        await engine.cancel("abc-1")


async def test_the_token_binds_operation_and_filter_is_single_use_and_lapses(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[waiter]) as engine:
        for i in range(2):
            await engine.start(waiter, id=f"tok-{i}")
        preview = await engine.bulk_preview("signal", signal=("go", 1), id_prefix="tok-")
        token = preview.confirmation_token
        for operation, signal, filters in (
            ("cancel", None, {"id_prefix": "tok-"}),
            ("signal", ("go", 2), {"id_prefix": "tok-"}),
            ("signal", ("go", 1), {"id_prefix": "tok-1"}),
        ):
            with pytest.raises(BulkOperationConfirmationError, match="another operation"):
                await engine.bulk_commit(
                    operation, confirmation_token=token, signal=signal, **filters
                )
        with pytest.raises(BulkOperationConfirmationError, match="dry run"):
            await engine.bulk_commit(
                "signal", confirmation_token="", signal=("go", 1), id_prefix="tok-"
            )
        # Refused commits leave the token usable; the right one spends it.
        first = await engine.bulk_commit(
            "signal", confirmation_token=token, signal=("go", 1), id_prefix="tok-"
        )
        assert first.applied == 2
        with pytest.raises(BulkOperationConfirmationError, match="unknown or already spent"):
            await engine.bulk_commit(
                "signal", confirmation_token=token, signal=("go", 1), id_prefix="tok-"
            )
        assert [await engine.get_handle(f"tok-{i}").result(timeout=5) for i in range(2)] == [1, 1]

        for i in range(2):
            await engine.start(waiter, id=f"tok-again-{i}")
        late = await engine.bulk_preview("signal", signal=("go", 1), id_prefix="tok-again-")
        backend.clock.advance(TOKEN_TTL_S + 1)
        with pytest.raises(BulkOperationConfirmationError, match="expired"):
            await engine.bulk_commit(
                "signal",
                confirmation_token=late.confirmation_token,
                signal=("go", 1),
                id_prefix="tok-again-",
            )
        fresh = await engine.bulk_preview("signal", signal=("go", 7), id_prefix="tok-again-")
        done = await engine.bulk_commit(
            "signal",
            confirmation_token=fresh.confirmation_token,
            signal=("go", 7),
            id_prefix="tok-again-",
        )
        assert (done.matched, done.applied) == (2, 2)
        again = [await engine.get_handle(f"tok-again-{i}").result(timeout=5) for i in range(2)]
        assert again == [7, 7]


async def test_concurrent_commits_with_one_token_apply_once(backend: Backend) -> None:
    async with backend.engine(workflows=[waiter]) as engine:
        for i in range(3):
            await engine.start(waiter, id=f"race-{i}")
        preview = await engine.bulk_preview("signal", signal=("go", "x"), id_prefix="race-")

        async def commit() -> Any:
            return await engine.bulk_commit(
                "signal",
                confirmation_token=preview.confirmation_token,
                signal=("go", "x"),
                id_prefix="race-",
            )

        outcomes = await asyncio.gather(*(commit() for _ in range(5)), return_exceptions=True)
        applied = [o for o in outcomes if not isinstance(o, BaseException)]
        refused = [o for o in outcomes if isinstance(o, BulkOperationConfirmationError)]
        assert len(applied) == 1 and len(refused) == 4
        assert len(await engine.bulk_audit()) == 1


async def test_retry_failed_forks_each_failed_run_and_skips_the_rest(backend: Backend) -> None:
    async with backend.engine(workflows=[failer]) as engine:
        for i in range(3):
            await engine.start(failer, i != 1, id=f"job-{i}")
        for i in range(3):
            with contextlib.suppress(WorkflowFailedError):
                await engine.get_handle(f"job-{i}").result(timeout=5)
        preview = await engine.bulk_preview("retry_failed", workflow_type="bulk_failer")
        assert preview.matched == 3
        result = await engine.bulk_commit(
            "retry_failed",
            confirmation_token=preview.confirmation_token,
            workflow_type="bulk_failer",
        )
        assert (result.applied, result.skipped) == (2, 1)
        assert result.skipped_sample == {"job-1": "its status is 'completed', not 'failed'"}
        assert len(result.created) == 2
        for new_id in result.created:
            info = await engine.describe(new_id)
            assert info.workflow_type == "bulk_failer" and info.forked_from in ("job-0", "job-2")


async def test_delete_refuses_unfinished_runs_and_deletes_finished_ones(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[waiter, failer]) as engine:
        await engine.start(waiter, id="del-live")
        for i in range(3):
            await engine.start(failer, False, id=f"del-{i}")
            await engine.get_handle(f"del-{i}").result(timeout=5)
        with pytest.raises(BulkDeleteRequiresTerminalWorkflowsError) as refused:
            await engine.bulk_preview("delete", id_prefix="del-")
        assert refused.value.running == ["del-live"]
        preview = await engine.bulk_preview("delete", id_prefix="del-", status="completed")
        result = await engine.bulk_commit(
            "delete",
            confirmation_token=preview.confirmation_token,
            id_prefix="del-",
            status="completed",
        )
        assert (result.matched, result.applied) == (3, 3)
        page = await engine.list(id_prefix="del-")
        assert [i.id for i in page.items] == ["del-live"]
        await engine.cancel("del-live")
