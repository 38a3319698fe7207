"""pyweft.sync.Engine: the async engine on a background loop thread, called from plain code."""

from __future__ import annotations

import _thread
import inspect
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import pyweft
import pyweft.sync
from pyweft import (
    ConfigurationError,
    EngineClosedError,
    InvalidArgumentError,
    ResultTimeoutError,
    WorkflowCancelledError,
    WorkflowContext,
    WorkflowEvent,
    WorkflowFailedError,
    WorkflowNotFoundError,
    WorkflowUsageError,
    activity,
    workflow,
)
from support.backends import Backend

LOOP_THREAD = "pyweft-sync-loop"


def eventually(check: Callable[[], bool], *, timeout: float = 5.0, what: str = "condition") -> None:
    """Poll ``check`` until it is true, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.002)


def blocked_in(thread: threading.Thread, function: str, module_suffix: str) -> bool:
    """True while ``thread`` is inside ``function`` of a module whose path ends so."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == function and code.co_filename.endswith(module_suffix):
            return True
        frame = frame.f_back
    return False


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'app.db'}"


def loop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == LOOP_THREAD]


@pytest.fixture(autouse=True)
def _no_loop_thread_survives_a_test() -> Iterator[None]:
    yield
    assert loop_threads() == [], "a test left a sync engine open"


# --- workflows ---------------------------------------------------------------------------


@activity
def double(x: int) -> int:  # a plain def: runs in the engine's activity threads
    return x * 2


@workflow
async def order(ctx: WorkflowContext, amount: int) -> dict[str, Any]:
    doubled = await ctx.run(double, amount)
    approval = await ctx.wait_for_signal("approval")
    return {"amount": doubled, "approval": approval}


@workflow
async def echo(ctx: WorkflowContext, value: Any) -> Any:
    return value


@workflow
async def fails(ctx: WorkflowContext) -> None:
    raise ValueError("out of stock")


@workflow
async def parked(ctx: WorkflowContext) -> Any:
    return await ctx.wait_for_signal("go")


@workflow
async def counter(ctx: WorkflowContext) -> int:
    count = 0

    def add(n: int) -> int:
        nonlocal count
        count += n
        return count

    ctx.on_update("add", add)
    ctx.on_query("count", lambda: count)
    await ctx.wait_for_signal("stop")
    return count


engines_by_run: dict[str, pyweft.sync.Engine] = {}


@activity
async def call_back_in(workflow_id: str) -> list[str]:
    """Runs on the engine's loop and uses the sync facade of that same engine."""
    engine = engines_by_run[workflow_id]
    refused = []
    calls: list[Callable[[], object]] = [
        lambda: engine.describe(workflow_id),
        lambda: engine.result(workflow_id),
        lambda: engine.signal(workflow_id, "x"),
        lambda: engine.events(),
        engine.close,
    ]
    for call in calls:
        try:
            call()
        except WorkflowUsageError as exc:
            refused.append(str(exc))
    # In-memory facts never wait, so they work there; the async engine is the way out.
    assert engine.is_running_here(workflow_id)
    info = await engine.async_engine.describe(workflow_id)
    return [*refused, info.status]


@workflow
async def reentrant(ctx: WorkflowContext) -> list[str]:
    return await ctx.run(call_back_in, ctx.workflow_id)


# --- a script, end to end --------------------------------------------------------------


def test_script_starts_signals_and_gets_the_result(backend: Backend) -> None:
    with pyweft.sync.Engine(backend.storage(), workflows=[order]) as engine:
        handle = engine.start(order, 21, id="order-1")
        assert isinstance(handle, pyweft.sync.WorkflowHandle)
        engine.signal("order-1", "approval", {"ok": True})
        assert handle.result(timeout=5) == {"amount": 42, "approval": {"ok": True}}
        assert engine.result("order-1") == {"amount": 42, "approval": {"ok": True}}
        info = handle.describe()
        assert info.status == "completed" and info.result == {
            "amount": 42,
            "approval": {"ok": True},
        }
        assert [step.kind for step in handle.history()] == [
            s.kind for s in engine.history("order-1")
        ]
        page = engine.list(workflow_type="order")
        assert [i.id for i in page.items] == ["order-1"]
        assert [(g.key, g.count) for g in engine.aggregate(group_by="status")] == [("completed", 1)]


def test_run_parked_on_a_signal_survives_close_and_resumes_in_a_new_engine(
    tmp_path: Path,
) -> None:
    url = sqlite_url(tmp_path)
    with pyweft.sync.Engine(url, workflows=[order]) as first:
        first.start(order, 5, id="durable")
        # Parked: the activity's step is committed and the run waits for its signal.
        eventually(lambda: (first.describe("durable").step_count or 0) >= 1, what="activity step")
    assert loop_threads() == []

    with pyweft.sync.Engine(url, workflows=[order]) as second:
        assert second.is_running_here("durable")  # recovered on open
        assert second.describe("durable").status == "running"
        second.signal("durable", "approval", "yes")
        assert second.get_handle("durable").result(timeout=5) == {"amount": 10, "approval": "yes"}


def test_errors_cross_the_thread_boundary_with_their_type_and_attributes(tmp_path: Path) -> None:
    with pyweft.sync.Engine(sqlite_url(tmp_path), workflows=[parked, fails]) as engine:
        with pytest.raises(WorkflowNotFoundError) as missing:
            engine.describe("nope")
        assert missing.value.workflow_id == "nope" and "nope" in str(missing.value)
        assert missing.value.code == "WorkflowNotFoundError"

        handle = engine.start(parked)
        with pytest.raises(ResultTimeoutError) as late:
            handle.result(timeout=0.05)
        assert late.value.workflow_id == handle.id and isinstance(late.value, TimeoutError)
        assert engine.describe(handle.id).status == "running"  # only the wait ended

        with pytest.raises(WorkflowFailedError) as failed:
            engine.start(fails).result(timeout=5)
        assert failed.value.error_type == "ValueError"
        assert failed.value.error_message == "out of stock"

        with pytest.raises(InvalidArgumentError):  # raised before the async method awaits
            engine.list(limit=0)
        engine.cancel(handle.id)


# --- lifecycle ---------------------------------------------------------------------------


def test_context_manager_opens_and_closes_and_leaves_no_thread_running(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    with pyweft.sync.Engine(sqlite_url(tmp_path), workflows=[order]) as engine:
        assert len(loop_threads()) == 1
        handle = engine.start(order, 1)  # runs a sync activity in the engine's thread pool
        handle.signal("approval", True)
        assert handle.result(timeout=5) == {"amount": 2, "approval": True}
    assert loop_threads() == []
    # The loop thread is joined by close(); the store's and the activity pool's threads
    # are told to stop by the engine's shutdown and end right after it.
    eventually(lambda: set(threading.enumerate()) <= before, what="every engine thread to end")


def test_explicit_open_and_close_and_close_is_idempotent(tmp_path: Path) -> None:
    engine = pyweft.sync.Engine(sqlite_url(tmp_path), workflows=[echo])
    engine.open()
    assert engine.schema_version == pyweft.sync.Engine.supported_schema_version
    assert engine.start(echo, "hi").result(timeout=5) == "hi"
    engine.close()
    engine.close()
    engine.shutdown()
    assert loop_threads() == []
    with pytest.raises(EngineClosedError, match="only once"):
        engine.open()


def test_calls_before_open_and_after_close_raise_engine_closed_error(tmp_path: Path) -> None:
    engine = pyweft.sync.Engine(sqlite_url(tmp_path))
    engine.register_workflow(echo)  # registration and facts work before open
    assert engine.workflow_types == ["echo"]
    assert engine.registered_versions() == {"echo": "1"}
    with pytest.raises(EngineClosedError, match="open"):
        engine.start(echo, 1)
    with pytest.raises(EngineClosedError):
        engine.describe("x")
    engine.open()
    handle = engine.start(echo, 1)
    assert handle.result(timeout=5) == 1
    engine.close()
    calls: list[Callable[[], object]] = [
        lambda: engine.start(echo, 2),
        lambda: handle.result(),
        lambda: engine.signal(handle.id, "x"),
        lambda: engine.list(),
        engine.recover_all,
    ]
    for call in calls:
        with pytest.raises(EngineClosedError):
            call()
    assert list(engine.events()) == []  # an ended iterator, as the async engine gives
    assert not engine.is_running_here(handle.id)


def test_constructor_errors_surface_at_once_and_leave_no_thread(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="poll_interval"):
        pyweft.sync.Engine(sqlite_url(tmp_path), poll_interval=0)
    assert loop_threads() == []


def run_script(source: str) -> str:
    """Run ``source`` in a fresh interpreter; return its output once it exited cleanly."""
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", textwrap.dedent(source)],
        capture_output=True,
        text=True,
        timeout=30,  # a hang at exit is the failure this guards against
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return done.stdout


def test_an_engine_left_open_is_closed_at_interpreter_exit(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    output = run_script(
        f"""
        import gc
        import pyweft.sync
        from pyweft import workflow

        @workflow
        async def parked(ctx):
            return await ctx.wait_for_signal("go")

        def main():
            engine = pyweft.sync.Engine({url!r}, workflows=[parked])
            engine.open()
            engine.start(parked, id="left-open")
            print("started", flush=True)
            # no close(), and no reference kept: the exit hook must still find it

        main()
        gc.collect()
        """
    )
    assert output == "started\n"
    with pyweft.sync.Engine(url, workflows=[parked]) as engine:
        assert engine.describe("left-open").status == "running"
        engine.signal("left-open", "go", 7)
        assert engine.result("left-open", timeout=5) == 7


def test_a_forked_child_gets_engine_closed_error_and_exits_cleanly(tmp_path: Path) -> None:
    output = run_script(
        f"""
        import os, sys
        import pyweft.sync
        from pyweft import EngineClosedError, workflow

        @workflow
        async def echo(ctx, value):
            return value

        engine = pyweft.sync.Engine({sqlite_url(tmp_path)!r}, workflows=[echo])
        engine.open()
        pid = os.fork()
        if pid == 0:
            try:
                engine.start(echo, 1)
            except EngineClosedError as exc:
                print("child:", "forked child" in str(exc), list(engine.events()), flush=True)
            sys.exit(0)  # a normal exit: the exit hook runs in the child too
        _, status = os.waitpid(pid, 0)
        result = engine.start(echo, 2).result(timeout=5)
        print("parent:", result, os.waitstatus_to_exitcode(status), flush=True)
        engine.close()
        """
    )
    assert output == "child: True []\nparent: 2 0\n"


# --- threads -----------------------------------------------------------------------------


def test_calling_the_facade_from_the_engine_loop_raises_instead_of_deadlocking(
    tmp_path: Path,
) -> None:
    with pyweft.sync.Engine(sqlite_url(tmp_path), workflows=[reentrant]) as engine:
        engines_by_run["loop-call"] = engine
        try:
            outcome = engine.start(reentrant, id="loop-call").result(timeout=5)
        finally:
            del engines_by_run["loop-call"]
    *refused, status = outcome
    assert status == "running"
    assert len(refused) == 5
    assert all("engine's own event loop" in m and "async Engine" in m for m in refused)
    assert "pyweft.sync.Engine.describe()" in refused[0]
    assert "async for event in sync_engine.async_engine.events(" in refused[3]
    assert "pyweft.sync.Engine.close()" in refused[-1]
    assert "await sync_engine.async_engine.shutdown()" in refused[-1]


def test_eight_threads_start_and_await_workflows_concurrently(tmp_path: Path) -> None:
    with pyweft.sync.Engine(sqlite_url(tmp_path), workflows=[echo, counter]) as engine:
        shared = engine.start(counter, id="shared")
        together = threading.Barrier(8)

        def client(n: int) -> list[Any]:
            together.wait(timeout=5)
            got = [engine.start(echo, f"{n}-{i}").result(timeout=10) for i in range(5)]
            got.append(engine.update("shared", "add", 1, timeout=10) > 0)
            return got

        with ThreadPoolExecutor(8) as pool:
            outcomes = list(pool.map(client, range(8)))

        assert outcomes == [[*(f"{n}-{i}" for i in range(5)), True] for n in range(8)]
        assert shared.query("count") == 8
        shared.signal("stop")
        assert shared.result(timeout=5) == 8
        assert engine.aggregate(group_by="status")[0].count == 41


def test_ctrl_c_during_result_stops_the_wait_and_the_engine_stays_usable(
    tmp_path: Path,
) -> None:
    main = threading.current_thread()
    assert main is threading.main_thread(), "KeyboardInterrupt reaches the main thread only"
    # A background job (`python3 tasks.py test &`) starts with SIGINT ignored, and then
    # interrupt_main() does nothing; give SIGINT Python's own handler, as a terminal would.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _ctrl_c_during_result(tmp_path, main)
    finally:
        signal.signal(signal.SIGINT, previous)


def _ctrl_c_during_result(tmp_path: Path, main: threading.Thread) -> None:
    with pyweft.sync.Engine(sqlite_url(tmp_path), workflows=[parked]) as engine:
        handle = engine.start(parked)

        def press_ctrl_c() -> None:
            eventually(lambda: blocked_in(main, "wait", "sync/loop.py"), what="result() to block")
            _thread.interrupt_main()

        presser = threading.Thread(target=press_ctrl_c)
        presser.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                handle.result()
        finally:
            presser.join()
        # The run did not notice; the engine still answers and the run still finishes.
        assert engine.describe(handle.id).status == "running"
        handle.signal("go", "after ctrl-c")
        assert handle.result(timeout=5) == "after ctrl-c"


def test_close_from_another_thread_ends_calls_waiting_for_a_result(tmp_path: Path) -> None:
    engine = pyweft.sync.Engine(sqlite_url(tmp_path), workflows=[parked])
    engine.open()
    handle = engine.start(parked)
    errors: list[BaseException] = []

    def wait_for_result() -> None:
        try:
            handle.result()
        except BaseException as exc:
            errors.append(exc)

    waiter = threading.Thread(target=wait_for_result)
    waiter.start()
    eventually(lambda: blocked_in(waiter, "wait", "sync/loop.py"), what="result() to block")
    engine.close()
    waiter.join(timeout=5)
    assert not waiter.is_alive()
    assert [type(e) for e in errors] == [EngineClosedError]


# --- events --------------------------------------------------------------------------------


def test_events_iterator_yields_lifecycle_events_as_they_happen(tmp_path: Path) -> None:
    with pyweft.sync.Engine(sqlite_url(tmp_path), workflows=[order]) as engine:
        with engine.events() as events:  # subscribed from here on
            handle = engine.start(order, 2, id="watched")
            handle.signal("approval", True)
            seen: list[WorkflowEvent] = []
            for event in events:
                seen.append(event)
                if event.kind == "completed":
                    break
        assert seen[0].kind == "started" and seen[0].workflow_id == "watched"
        assert "step_completed" in [e.kind for e in seen]

        # A handle's events end by themselves after the run's terminal event.
        other = engine.start(order, 3)
        run_events = other.events()
        other.signal("approval", False)
        assert [e.kind for e in run_events][-1] == "completed"
        assert list(run_events) == []


def test_closing_an_events_iterator_or_the_engine_ends_a_blocked_iteration(
    tmp_path: Path,
) -> None:
    engine = pyweft.sync.Engine(sqlite_url(tmp_path), workflows=[echo])
    engine.open()
    try:
        for stop in ("iterator", "engine"):
            events = engine.events()
            got: list[WorkflowEvent] = []
            consumer = threading.Thread(target=lambda: got.extend(events))  # noqa: B023
            consumer.start()
            eventually(lambda: blocked_in(consumer, "__next__", "sync/events.py"), what="next()")  # noqa: B023
            if stop == "iterator":
                events.close()
            else:
                engine.close()
            consumer.join(timeout=5)
            assert not consumer.is_alive() and got == []
    finally:
        engine.close()


# --- the facade mirrors the async API ------------------------------------------------------


def parameters(fn: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


# Public async methods with no blocking twin, each for a stated reason.
ASYNC_ONLY = {
    # The broker's methods are coroutines run on an ASGI server's event loop (the
    # WebSocket task streams); code using pyweft.sync has no loop to run them on.
    "task_broker",
}


@pytest.mark.parametrize(
    ("async_cls", "sync_cls"),
    [(pyweft.Engine, pyweft.sync.Engine), (pyweft.WorkflowHandle, pyweft.sync.WorkflowHandle)],
)
def test_every_public_async_method_has_a_blocking_twin_with_the_same_parameters(
    async_cls: type, sync_cls: type
) -> None:
    missing = public(async_cls) - public(sync_cls) - ASYNC_ONLY
    assert not missing, f"pyweft.sync lacks {sorted(missing)}"
    for name in [*sorted(public(async_cls) - ASYNC_ONLY), "__init__"]:
        mine, theirs = (
            inspect.getattr_static(sync_cls, name),
            inspect.getattr_static(async_cls, name),
        )
        assert type(mine) is type(theirs), name
        if inspect.isfunction(theirs):
            assert not inspect.iscoroutinefunction(mine), name
            assert parameters(mine) == parameters(theirs), name


def test_instance_facts_of_the_async_engine_are_readable(tmp_path: Path) -> None:
    with pyweft.sync.Engine(sqlite_url(tmp_path)) as engine:
        inner = engine.async_engine
        for name in ("clock", "codec", "instance_id", "ownership", "max_payload_bytes"):
            assert getattr(engine, name) is getattr(inner, name), name
        assert engine.store_was_new and engine.schema_version == inner.schema_version
        assert engine.storage is inner.storage
        assert engine.lease_health().state == "no-lease"
        assert isinstance(engine.store_ownership(), pyweft.StoreOwnership)


def test_handle_methods_block_until_the_engine_answers(tmp_path: Path) -> None:
    with pyweft.sync.Engine(sqlite_url(tmp_path), workflows=[counter]) as engine:
        handle = engine.start(counter, id="c")
        assert handle.update("add", 2) == 2
        assert handle.query("count") == 2 and engine.query("c", "count") == 2
        handle.suspend()
        assert handle.describe().status == "suspended"
        handle.resume()
        assert handle.describe().status == "running"
        assert engine.update("c", "add", 3, timeout="5s") == 5
        handle.cancel()
        with pytest.raises(WorkflowCancelledError) as cancelled:
            handle.result(timeout=5)
        assert cancelled.value.workflow_id == "c"
