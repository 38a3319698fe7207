"""Bulk commits under storage faults: applied once per run, audited as applied, resumable.

Each write of a bulk commit (the token spend, each run's operation, the audit
record) is failed in turn with :class:`~pyweft.testing.FaultyStorage`, either
before it reaches the store or after it landed with its reply lost. The user
then does what users do: commits again with the same token. Whatever the fault,

* each matched run gets the operation once (no run signalled or forked twice);
* there is one audit record, and it counts what was actually applied;
* the token is spent once: after the operation finished it is refused.

The workflows catch ``Exception`` around their waits, as users write them; a
cancel must still get through.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest

from pyweft import (
    BulkOperationConfirmationError,
    Engine,
    StorageError,
    WorkflowCancelledError,
    WorkflowContext,
    WorkflowFailedError,
    open_storage,
    workflow,
)
from pyweft.engine.bulk import AUDIT_PREFIX, CLAIM_LEASE_S, TOKEN_PREFIX
from pyweft.engine.replay import keys, records
from pyweft.storage.base import Delete, Op, Put
from pyweft.testing import FaultyStorage
from support.backends import Backend
from support.poll import eventually

RUNS = ("bf-0", "bf-1", "bf-2")
FAULTED = "bf-1"  # the run whose operation meets the fault


@workflow(name="bf_collector")
async def collector(ctx: WorkflowContext) -> list[Any]:
    got: list[Any] = []
    while True:
        try:
            item = await ctx.wait_for_signal("go")
        except Exception:  # as users write it
            return [*got, "error"]
        if item == "stop":
            return got
        got.append(item)


@workflow(name="bf_sleeper")
async def sleeper(ctx: WorkflowContext) -> str:
    try:
        await ctx.sleep(10 * 86400)
    except Exception:  # a cancel is not an Exception: it must get through
        return "swallowed"
    return "woke"


@workflow(name="bf_failer")
async def failer(ctx: WorkflowContext, fail: bool) -> str:
    if fail:
        raise ValueError("boom")
    return "ok"


WORKFLOWS = [collector, sleeper, failer]


@contextlib.asynccontextmanager
async def faulty_engine(backend: Backend) -> AsyncIterator[tuple[Engine, FaultyStorage]]:
    inner = backend.storage()
    store = FaultyStorage(open_storage(inner) if isinstance(inner, str) else inner)
    kwargs: dict[str, Any] = {"clock": backend.clock}
    if backend.name == "postgres":
        kwargs["ownership"] = "none"  # as the backend fixture's engines (see Backend.engine)
    try:
        async with Engine(store, workflows=WORKFLOWS, **kwargs) as engine:
            yield engine, store
    finally:
        store.heal()
        if isinstance(inner, str):
            await store.close()


# --- which write meets the fault ---------------------------------------------------------

Match = Callable[[Sequence[Op]], bool]


def _token_write(ops: Sequence[Op]) -> bool:
    return any(op.key.startswith(TOKEN_PREFIX) for op in ops)


def _audit_write(ops: Sequence[Op]) -> bool:
    return any(op.key.startswith(AUDIT_PREFIX) for op in ops)


def _signal_to(workflow_id: str) -> Match:
    key = keys.signal_seq(workflow_id)
    return lambda ops: any(isinstance(op, Put) and op.key == key for op in ops)


def _cancel_of(workflow_id: str) -> Match:
    key = keys.wf(workflow_id)

    def match(ops: Sequence[Op]) -> bool:
        for op in ops:
            if isinstance(op, Put) and op.key == key:
                return records.decode_state(op.value).cancel_requested
        return False

    return match


def _fork_of(workflow_id: str) -> Match:
    def match(ops: Sequence[Op]) -> bool:
        for op in ops:
            if isinstance(op, Put) and op.key.startswith("wf:") and op.key.count(":") == 1:
                with contextlib.suppress(Exception):
                    if records.decode_state(op.value).forked_from == workflow_id:
                        return True
        return False

    return match


def _purge_of(workflow_id: str) -> Match:
    key = keys.wf(workflow_id)
    return lambda ops: any(isinstance(op, Delete) and op.key == key for op in ops)


RUN_WRITE: dict[str, Callable[[str], Match]] = {
    "signal": _signal_to,
    "cancel": _cancel_of,
    "retry_failed": _fork_of,
    "delete": _purge_of,
}
POINTS = ("spend", "run", "audit")
OUTCOMES = {"failed": False, "reply-lost": True}


def _arm(store: FaultyStorage, operation: str, point: str, outcome_unknown: bool) -> None:
    match = {"spend": _token_write, "audit": _audit_write}.get(point)
    if match is None:
        match = RUN_WRITE[operation](FAULTED)
    store.fail_nth_write(match=match, outcome_unknown=outcome_unknown)


# --- setting up runs and committing as a user would ---------------------------------------


async def _prepare(engine: Engine, operation: str) -> dict[str, Any]:
    """Start the runs the operation acts on; returns the operation's arguments."""
    if operation == "signal":
        for i in RUNS:
            await engine.start(collector, id=i)
        await eventually(lambda: all(engine.is_running_here(i) for i in RUNS), what="collectors")
        return {"signal": ("go", "x"), "workflow_type": "bf_collector"}
    if operation == "cancel":
        for i in RUNS:
            await engine.start(sleeper, id=i)
        await eventually(lambda: all(engine.is_running_here(i) for i in RUNS), what="sleepers")
        return {"workflow_type": "bf_sleeper", "status": "running"}
    for i in RUNS:
        await engine.start(failer, True, id=i)
        with pytest.raises(WorkflowFailedError):
            await engine.get_handle(i).result(timeout=10)
    return {"workflow_type": "bf_failer", "status": "failed"}


async def _commit_as_a_user(
    engine: Engine, operation: str, token: str, args: dict[str, Any]
) -> Any:
    """Commit; on a storage error or failed runs commit again with the same token.

    Returns the last result, or the refusal once the token is refused (the operation
    finished in a commit whose reply was lost: its audit record is then the answer).
    """
    outcome: Any = None
    for _ in range(3):
        try:
            outcome = await engine.bulk_commit(operation, confirmation_token=token, **args)
        except StorageError as exc:
            outcome = exc
            continue
        except BulkOperationConfirmationError as exc:
            return exc
        if not outcome.failed:
            return outcome
    return outcome


async def _check_applied_once(engine: Engine, operation: str) -> None:
    if operation == "signal":
        for i in RUNS:
            await engine.signal(i, "go", "stop")
        assert [await engine.get_handle(i).result(timeout=10) for i in RUNS] == [["x"]] * 3
    elif operation == "cancel":
        for i in RUNS:
            with pytest.raises(WorkflowCancelledError):
                await engine.get_handle(i).result(timeout=10)
    elif operation == "retry_failed":
        forks = [info for info in (await engine.list(workflow_type="bf_failer")).items]
        sources = sorted(info.forked_from for info in forks if info.forked_from)
        assert sources == sorted(RUNS), "each failed run forked once"
    else:
        assert (await engine.list(workflow_type="bf_failer")).items == []


@pytest.mark.parametrize("outcome", OUTCOMES)
@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("operation", ["signal", "cancel", "retry_failed", "delete"])
async def test_a_commit_retried_after_a_storage_fault_applies_once_and_audits_it(
    backend: Backend, operation: str, point: str, outcome: str
) -> None:
    async with faulty_engine(backend) as (engine, store):
        args = await _prepare(engine, operation)
        preview = await engine.bulk_preview(operation, **args)
        assert preview.matched == 3
        _arm(store, operation, point, OUTCOMES[outcome])

        last = await _commit_as_a_user(engine, operation, preview.confirmation_token, args)

        assert store.counts.errors == 1, "the armed fault fired"
        (audit,) = await engine.bulk_audit()
        assert (audit["matched"], audit["applied"], audit["failed"]) == (3, 3, 0), audit
        if isinstance(last, BulkOperationConfirmationError):
            # Only when the commit that finished the operation lost its reply.
            assert (point, outcome) == ("audit", "reply-lost"), last
        else:
            assert (last.matched, last.applied, last.failed) == (3, 3, {})
            assert last.audit_id == audit["audit_id"]
        with pytest.raises(BulkOperationConfirmationError, match="already spent"):
            await engine.bulk_commit(
                operation, confirmation_token=preview.confirmation_token, **args
            )
        await _check_applied_once(engine, operation)


async def test_a_failed_run_is_reported_and_audited_and_the_same_token_finishes_it(
    backend: Backend,
) -> None:
    async with faulty_engine(backend) as (engine, store):
        args = await _prepare(engine, "signal")
        preview = await engine.bulk_preview("signal", **args)
        store.fail_nth_write(match=_signal_to(FAULTED))
        first = await engine.bulk_commit(
            "signal", confirmation_token=preview.confirmation_token, **args
        )
        assert (first.applied, list(first.failed)) == (2, [FAULTED])
        assert "commit again with the same token" in first.failed[FAULTED]
        (audit,) = await engine.bulk_audit()
        assert (audit["applied"], audit["failed"]) == (2, 1), "the audit says it is partial"

        again = await engine.bulk_commit(
            "signal", confirmation_token=preview.confirmation_token, **args
        )
        assert (again.applied, again.failed, again.audit_id) == (3, {}, first.audit_id)
        (audit,) = await engine.bulk_audit()
        assert (audit["applied"], audit["failed"]) == (3, 0)
        await _check_applied_once(engine, "signal")


async def test_a_commit_is_refused_while_another_with_the_same_token_is_in_flight(
    backend: Backend,
) -> None:
    async with faulty_engine(backend) as (engine, store):
        args = await _prepare(engine, "signal")
        preview = await engine.bulk_preview("signal", **args)
        held = store.pause_next_write(match=_signal_to(FAULTED))

        async def commit() -> Any:
            return await engine.bulk_commit(
                "signal", confirmation_token=preview.confirmation_token, **args
            )

        import asyncio

        first = asyncio.create_task(commit())
        await held.reached()
        with pytest.raises(BulkOperationConfirmationError, match="in progress"):
            await commit()
        held.release()
        assert (await first).applied == 3
        assert len(await engine.bulk_audit()) == 1
        await _check_applied_once(engine, "signal")


async def test_a_commit_cut_off_without_a_trace_can_be_resumed_once_its_claim_lapses(
    backend: Backend,
) -> None:
    async with faulty_engine(backend) as (engine, store):
        args = await _prepare(engine, "signal")
        preview = await engine.bulk_preview("signal", **args)
        # The audit write fails, and so does the note that the commit was interrupted:
        # nothing in the store says the claim is free, as after a crash.
        store.fail_nth_write(match=_audit_write)
        # (The first token write is the claim; the second is that note.)
        store.fail_nth_write(2, match=lambda ops: _token_write(ops) and not _audit_write(ops))
        with pytest.raises(StorageError):
            await engine.bulk_commit(
                "signal", confirmation_token=preview.confirmation_token, **args
            )
        with pytest.raises(BulkOperationConfirmationError, match="in progress"):
            await engine.bulk_commit(
                "signal", confirmation_token=preview.confirmation_token, **args
            )
        assert await engine.bulk_audit() == []
        backend.clock.advance(CLAIM_LEASE_S + 1)
        done = await engine.bulk_commit(
            "signal", confirmation_token=preview.confirmation_token, **args
        )
        assert (done.applied, done.failed) == (3, {})
        (audit,) = await engine.bulk_audit()
        assert (audit["applied"], audit["audit_id"]) == (3, done.audit_id)
        await _check_applied_once(engine, "signal")


@pytest.mark.parametrize("outcome", OUTCOMES)
async def test_a_dry_run_whose_token_write_fails_raises_and_a_second_one_works(
    backend: Backend, outcome: str
) -> None:
    async with faulty_engine(backend) as (engine, store):
        args = await _prepare(engine, "signal")
        store.fail_nth_write(match=_token_write, outcome_unknown=OUTCOMES[outcome])
        with pytest.raises(StorageError):
            await engine.bulk_preview("signal", **args)
        preview = await engine.bulk_preview("signal", **args)
        result = await engine.bulk_commit(
            "signal", confirmation_token=preview.confirmation_token, **args
        )
        assert (result.applied, result.failed) == (3, {})
        await _check_applied_once(engine, "signal")


# --- random faults on every call, many runs -------------------------------------------------

MANY = 12


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("operation", ["signal", "cancel", "retry_failed", "delete"])
async def test_random_faults_on_every_call_still_apply_each_run_once(
    backend: Backend, operation: str, seed: int
) -> None:
    async with faulty_engine(backend) as (engine, store):
        ids = [f"rf-{i:02d}" for i in range(MANY)]
        wf, filters = {
            "signal": (collector, {"workflow_type": "bf_collector"}),
            "cancel": (sleeper, {"workflow_type": "bf_sleeper", "status": "running"}),
        }.get(operation, (failer, {"workflow_type": "bf_failer", "status": "failed"}))
        for i in ids:
            await (engine.start(wf, True, id=i) if wf is failer else engine.start(wf, id=i))
        if wf is failer:
            for i in ids:
                with pytest.raises(WorkflowFailedError):
                    await engine.get_handle(i).result(timeout=10)
        else:
            await eventually(lambda: all(engine.is_running_here(i) for i in ids), what="runs")
        args: dict[str, Any] = dict(filters)
        if operation == "signal":
            args["signal"] = ("go", "x")
        preview = await engine.bulk_preview(operation, **args)
        assert preview.matched == MANY

        store.configure(read_failure_rate=0.05, write_failure_rate=0.1, lost_reply_rate=0.1)
        store.seed = seed
        store._rng.seed(seed)
        outcome: Any = None
        for _ in range(60):  # as a user (or a script) would: again, with the same token
            try:
                outcome = await engine.bulk_commit(
                    operation, confirmation_token=preview.confirmation_token, **args
                )
            except StorageError:
                continue
            except BulkOperationConfirmationError as exc:
                if "in progress" in str(exc):  # a stopped commit that could not say so
                    backend.clock.advance(CLAIM_LEASE_S + 1)
                    continue
                outcome = exc  # spent: an attempt finished (its reply may have been lost)
                break
            if not outcome.failed:
                break
        store.heal()
        assert store.counts.errors > 0
        assert not isinstance(outcome, StorageError), "60 attempts did not get through"
        if not isinstance(outcome, BulkOperationConfirmationError):
            assert (outcome.applied, outcome.failed) == (MANY, {}), outcome
        (audit,) = await engine.bulk_audit()
        assert (audit["matched"], audit["applied"], audit["failed"]) == (MANY, MANY, 0), audit
        if operation == "signal":
            for i in ids:
                await engine.signal(i, "go", "stop")
            results = [await engine.get_handle(i).result(timeout=20) for i in ids]
            assert results == [["x"]] * MANY
        elif operation == "cancel":
            for i in ids:
                with pytest.raises(WorkflowCancelledError):
                    await engine.get_handle(i).result(timeout=20)
        elif operation == "retry_failed":
            forks = (await engine.list(workflow_type="bf_failer", limit=100)).items
            assert sorted(f.forked_from for f in forks if f.forked_from) == ids
        else:
            assert (await engine.list(workflow_type="bf_failer")).items == []


# --- a real outage: PostgreSQL backends killed while a lock holds the commit up -------------


@pytest.mark.postgres
async def test_a_commit_whose_postgres_backends_are_killed_mid_way_is_finished_once() -> None:
    import asyncio

    import psycopg
    from psycopg import sql

    from pyweft import VirtualClock
    from pyweft.storage import PostgresStorage
    from support.backends import postgres_schema

    with postgres_schema() as (url, schema):
        clock = VirtualClock()
        store = FaultyStorage(PostgresStorage(url, schema=schema))
        try:
            async with Engine(store, workflows=WORKFLOWS, clock=clock, ownership="none") as engine:
                args = await _prepare(engine, "signal")
                preview = await engine.bulk_preview("signal", **args)
                # Hold bf-1's signal at the door, lock the table, then let it go: it and
                # every write after it wait on the lock until their backend is killed.
                held = store.pause_next_write(match=_signal_to(FAULTED))
                commit = asyncio.create_task(
                    engine.bulk_commit(
                        "signal", confirmation_token=preview.confirmation_token, **args
                    )
                )
                await held.reached()
                locker = psycopg.connect(url)
                killed = 0
                try:
                    locker.execute(
                        sql.SQL("LOCK TABLE {}.kv IN EXCLUSIVE MODE").format(sql.Identifier(schema))
                    )
                    held.release()
                    for _ in range(2000):
                        if commit.done():
                            break
                        killed += _kill_waiting(url, schema)
                        await asyncio.sleep(0.01)
                finally:
                    locker.rollback()
                    locker.close()
                assert killed >= 1 and commit.done()
                first = commit.exception() or commit.result()
                assert isinstance(first, StorageError) or first.failed, first
                for _ in range(5):
                    try:
                        done = await engine.bulk_commit(
                            "signal", confirmation_token=preview.confirmation_token, **args
                        )
                    except BulkOperationConfirmationError as exc:
                        assert "in progress" in str(exc), exc
                        clock.advance(CLAIM_LEASE_S + 1)
                        continue
                    if not done.failed:
                        break
                assert (done.applied, done.failed) == (3, {})
                (audit,) = await engine.bulk_audit()
                assert (audit["applied"], audit["failed"]) == (3, 0)
                await _check_applied_once(engine, "signal")
        finally:
            await store.close()


def _kill_waiting(url: str, schema: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND wait_event_type = 'Lock'",
            (f"pyweft:{schema}",),
        ).fetchall()
    return len(rows)
