"""The CLI messaging runs across processes: an engine in this process drives workflows,
and ``pyweft`` runs as a separate process against the same SQLite file.

Nothing here is delivered in memory: the CLI's engine runs with ``recover=False``
and no workflow types, so every signal, update, decision and lifecycle change
reaches the test engine only through the store it polls.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pyweft import (
    Engine,
    QueryNotFoundError,
    WorkflowCancelledError,
    WorkflowContext,
    activity,
    workflow,
)
from support.poll import eventually

PYWEFT = [sys.executable, "-m", "pyweft.cli.main"]
POLL = 0.05  # the test engine's store polling interval: cross-process pickup is fast


# --- workflows driven by the test engine ----------------------------------------------


@workflow
async def concierge(ctx: WorkflowContext, guest: str) -> dict[str, Any]:
    ctx.on_query("guest", lambda: guest)
    greeting = await ctx.wait_for_signal("greet")
    request = await ctx.wait_for_update("ask")
    await request.respond({"greeting": greeting, "question": request.payload})
    decision = await ctx.review(
        {"guest": guest, "greeting": greeting}, review_type="welcome", reviewers=["ops"]
    )
    return {
        "greeting": greeting,
        "decision": decision.decision,
        "reviewer": decision.reviewer,
        "feedback": decision.feedback,
    }


@workflow
async def echo(ctx: WorkflowContext) -> None:
    answered = 0
    while True:
        request = await ctx.wait_for_update("echo")
        answered += 1
        await request.respond({"got": request.payload, "n": answered})


@activity
async def shout(text: str) -> str:
    return text.upper()


@workflow
async def herald(ctx: WorkflowContext) -> str:
    news = await ctx.wait_for_signal("news")
    return await ctx.run(shout, news)


@workflow
async def tally(ctx: WorkflowContext) -> int:
    total = 0

    def add(amount: int) -> int:
        nonlocal total
        total += amount
        return total

    ctx.on_update("add", add)
    await ctx.wait_for_signal("stop")
    return total


WORKFLOWS: list[Callable[..., Any]] = [concierge, echo, herald, tally]


# --- the CLI as a subprocess -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Done:
    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return f"exit {self.code}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"

    def json(self) -> Any:
        return json.loads(self.stdout)


async def pyweft(db: Path | None, *args: str, timeout: float = 30) -> Done:
    """Run ``pyweft *args`` with ``$PYWEFT_DATABASE_URL`` pointing at ``db``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYWEFT_DATABASE_URL", "FORCE_COLOR")}
    env.update(COLUMNS="200", NO_COLOR="1")
    if db is not None:
        env["PYWEFT_DATABASE_URL"] = f"sqlite:///{db}"
    proc = await asyncio.create_subprocess_exec(
        *PYWEFT,
        *args,
        env=env,
        cwd=db.parent if db is not None else None,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return Done(proc.returncode, out.decode(), err.decode())


def one_error_line(done: Done, code: str) -> str:
    """The single stderr line of a failed command, checked to carry ``code``."""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.output
    assert lines[0].startswith(f"error: {code}: "), done.output
    return lines[0]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"


@pytest.fixture
async def engine(db: Path) -> AsyncIterator[Engine]:
    async with Engine(f"sqlite:///{db}", workflows=WORKFLOWS, poll_interval=POLL) as engine:
        yield engine


async def completed_steps(engine: Engine, workflow_id: str) -> int:
    return sum(1 for s in (await engine.history(workflow_id)).steps if s.status == "completed")


# --- signals, updates and reviews --------------------------------------------------------


async def test_signal_update_and_review_from_the_cli_reach_a_run_in_another_process(
    engine: Engine, db: Path
) -> None:
    handle = await engine.start(concierge, "ada", id="stay-1")

    sent = await pyweft(db, "workflows", "signal", "stay-1", "greet", '{"text": "hi"}')
    assert sent.code == 0, sent.output
    assert "signal 'greet' stored for stay-1" in sent.stdout

    asked = await pyweft(db, "workflows", "update", "stay-1", "ask", '"late checkout?"', "--json")
    assert asked.code == 0, asked.output
    answer = {"greeting": {"text": "hi"}, "question": "late checkout?"}
    assert asked.json() == {
        "workflow_id": "stay-1",
        "update": "ask",
        "answered": True,
        "result": answer,
    }

    async def review_requested() -> bool:
        return bool(await engine.list_reviews(workflow_id="stay-1"))

    await eventually(review_requested, what="the welcome review to be requested")
    listed = await pyweft(db, "reviews", "list", "--json")
    assert listed.code == 0, listed.output
    [review] = listed.json()["items"]
    assert review["workflow_id"] == "stay-1"
    assert (review["review_type"], review["status"]) == ("welcome", "pending")
    assert review["reviewers"] == ["ops"]
    assert review["artifact"] == {"guest": "ada", "greeting": {"text": "hi"}}
    review_id = review["review_id"]

    table = await pyweft(db, "reviews", "list", "--workflow", "stay-1", "--type", "welcome")
    assert table.code == 0, table.output
    assert review_id in table.stdout and "pending" in table.stdout and "ops" in table.stdout

    decided = await pyweft(
        db, "reviews", "decide", review_id, "approved", "--reviewer", "alice", "--feedback", "enjoy"
    )
    assert decided.code == 0, decided.output
    assert f"review {review_id}: approved by alice" in decided.stdout

    assert await handle.result(timeout=10) == {
        "greeting": {"text": "hi"},
        "decision": "approved",
        "reviewer": "alice",
        "feedback": "enjoy",
    }

    again = await pyweft(db, "reviews", "decide", review_id, "rejected", "--reviewer", "bob")
    assert again.code == 1
    one_error_line(again, "ReviewAlreadyDecidedError")

    pending = await pyweft(db, "reviews", "list")
    assert pending.code == 0 and "no reviews match" in pending.stdout
    approved = (await pyweft(db, "reviews", "list", "--status", "approved", "--json")).json()
    assert [(r["review_id"], r["reviewer"]) for r in approved["items"]] == [(review_id, "alice")]
    every = (await pyweft(db, "reviews", "list", "--status", "all", "--json")).json()
    assert [r["status"] for r in every["items"]] == ["approved"]


async def test_update_without_a_payload_sends_none_and_idempotency_keys_apply_once(
    engine: Engine, db: Path
) -> None:
    await engine.start(echo, id="echo-1")

    bare = await pyweft(db, "workflows", "update", "echo-1", "echo")
    assert bare.code == 0, bare.output
    assert bare.stdout.strip() == '{"got":null,"n":1}'

    keyed = ("workflows", "update", "echo-1", "echo", "[1, 2]", "--idempotency-key", "k1")
    first = await pyweft(db, *keyed, "--json")
    second = await pyweft(db, *keyed, "--json")
    assert first.code == second.code == 0, first.output + second.output
    assert first.json()["result"] == second.json()["result"] == {"got": [1, 2], "n": 2}

    negative = await pyweft(db, "workflows", "update", "echo-1", "echo", "--", "-3")
    assert negative.code == 0, negative.output
    assert negative.stdout.strip() == '{"got":-3,"n":3}'


async def test_an_update_that_times_out_prints_its_id_and_update_result_fetches_the_answer(
    engine: Engine, db: Path
) -> None:
    await engine.start(concierge, "bo", id="stay-2")  # waits for "greet" before any "ask"

    early = await pyweft(
        db, "workflows", "update", "stay-2", "ask", '"breakfast?"', "--timeout", "300ms"
    )
    assert early.code == 1, early.output
    first, hint = early.stderr.strip().splitlines()
    assert first.startswith("error: UpdateTimeoutError: ")
    # The hint keeps the --db the user passed, so it can be pasted as it is.
    found = re.search(r"`pyweft workflows update-result (\w+) --db \S+`", hint)
    assert found is not None, hint
    update_id = found.group(1)
    assert update_id in first

    waiting = await pyweft(db, "workflows", "update-result", update_id, "--timeout", "100ms")
    assert waiting.code == 1
    assert "UpdateTimeoutError" in waiting.stderr

    sent = await pyweft(db, "workflows", "signal", "stay-2", "greet", '"hello"')
    assert sent.code == 0, sent.output
    fetched = await pyweft(
        db, "workflows", "update-result", update_id, "--timeout", "10s", "--json"
    )
    assert fetched.code == 0, fetched.output
    assert fetched.json()["result"] == {"greeting": "hello", "question": "breakfast?"}


async def test_query_from_the_cli_is_answered_by_the_engine_that_runs_the_workflow(
    engine: Engine, db: Path
) -> None:
    await engine.start(concierge, "cy", id="stay-3")

    async def live() -> bool:
        try:
            return bool(await engine.query("stay-3", "guest") == "cy")
        except QueryNotFoundError:
            return False

    await eventually(live, what="the run to register its query handler")
    asked = await pyweft(db, "workflows", "query", "stay-3", "guest", "--json")
    assert asked.code == 0, asked.output
    assert asked.json() == {"workflow_id": "stay-3", "query": "guest", "result": "cy"}
    missing = await pyweft(db, "workflows", "query", "stay-3", "nope")
    assert missing.code == 1
    assert "guest" in one_error_line(missing, "QueryNotFoundError")  # names what it has
    assert await engine.storage.scan("qry:") == [] and await engine.storage.scan("qrs:") == []


async def test_query_from_the_cli_with_no_engine_running_is_unavailable_after_its_timeout(
    db: Path,
) -> None:
    async with Engine(f"sqlite:///{db}", workflows=WORKFLOWS, poll_interval=POLL) as engine:
        await engine.start(concierge, "dee", id="stay-9")
        await eventually(lambda: engine.is_running_here("stay-9"), what="running")
    asked = await pyweft(db, "workflows", "query", "stay-9", "guest", "--timeout", "300ms")
    assert asked.code == 1
    line = one_error_line(asked, "QueryUnavailableError")
    assert "within 0.3s" in line
    assert asked.stdout == ""
    async with Engine(f"sqlite:///{db}", workflows=WORKFLOWS, poll_interval=POLL) as engine:
        assert await engine.storage.scan("qry:") == []  # the asker took its question back


# --- lifecycle ---------------------------------------------------------------------------


async def test_cancel_from_the_cli_marks_the_run_cancelled(engine: Engine, db: Path) -> None:
    await engine.start(concierge, "di", id="stay-4")

    cancelled = await pyweft(db, "workflows", "cancel", "stay-4")
    assert cancelled.code == 0, cancelled.output
    assert "cancel requested" in cancelled.stdout

    async def is_cancelled() -> bool:
        return (await engine.describe("stay-4")).status == "cancelled"

    await eventually(is_cancelled, timeout=3, what="the driving engine to cancel it")

    again = await pyweft(db, "workflows", "cancel", "stay-4")
    assert again.code == 0, again.output
    assert again.stdout.strip() == "stay-4 is already cancelled"

    refused = await pyweft(db, "workflows", "signal", "stay-4", "greet", '"late"')
    assert refused.code == 1
    one_error_line(refused, "WorkflowTerminalError")


async def test_suspend_and_resume_from_the_cli_hand_the_run_to_the_next_engine_that_recovers_it(
    db: Path,
) -> None:
    async with Engine(f"sqlite:///{db}", workflows=WORKFLOWS, poll_interval=POLL) as first:
        await first.start(concierge, "ed", id="stay-5")
        suspended = await pyweft(db, "workflows", "suspend", "stay-5")
        assert suspended.code == 0, suspended.output
        assert suspended.stdout.startswith("stay-5 is now suspended")
        assert "pyweft workflows resume stay-5" in suspended.stdout
        assert (await first.describe("stay-5")).status == "suspended"
        again = await pyweft(db, "workflows", "suspend", "stay-5")
        assert again.stdout.strip() == "stay-5 is already suspended", again.output

    resumed = await pyweft(db, "workflows", "resume", "stay-5")
    assert resumed.code == 0, resumed.output
    assert resumed.stdout.startswith("stay-5 is now running. A running engine")
    assert "recovers it" in resumed.stdout
    assert resumed.stderr == ""  # no engine warnings leak from the short-lived process
    running = await pyweft(db, "workflows", "resume", "stay-5")
    assert running.stdout.strip() == "stay-5 is already running", running.output

    async with Engine(f"sqlite:///{db}", workflows=WORKFLOWS, poll_interval=POLL) as second:
        assert second.is_running_here("stay-5")  # recovered when it opened
        assert (await completed_steps(second, "stay-5")) == 0  # the CLI drove nothing
        sent = await pyweft(db, "workflows", "signal", "stay-5", "greet", '"welcome back"')
        assert sent.code == 0, sent.output
        asked = await pyweft(db, "workflows", "update", "stay-5", "ask", '"spa?"', "--json")
        assert asked.code == 0, asked.output
        assert asked.json()["result"] == {"greeting": "welcome back", "question": "spa?"}
        await second.cancel("stay-5")
        with pytest.raises(WorkflowCancelledError):
            await second.get_handle("stay-5").result(timeout=10)

    finished = await pyweft(db, "workflows", "resume", "stay-5")
    assert finished.code == 1
    one_error_line(finished, "WorkflowTerminalError")


# --- show ----------------------------------------------------------------------------------


async def test_show_prints_the_steps_then_the_events_in_order(engine: Engine, db: Path) -> None:
    handle = await engine.start(herald, id="herald-1")
    await engine.signal("herald-1", "news", "ship it")
    assert await handle.result(timeout=10) == "SHIP IT"

    shown = await pyweft(db, "workflows", "show", "herald-1", "--json")
    assert shown.code == 0, shown.output
    data = shown.json()
    assert [(s["kind"], s["name"]) for s in data["steps"]] == [
        ("signal", "news"),
        ("activity", "shout"),
    ]
    events = data["events"]
    assert [(e["kind"], e["step"]) for e in events] == [
        ("created", None),
        ("step_completed", 1),
        ("step_completed", 2),
        ("completed", None),
    ]
    assert events[0]["detail"] == "herald"
    assert events[2]["detail"] == "activity shout"
    assert {"at", "kind", "step", "detail"} == set(events[0])

    table = await pyweft(db, "workflows", "show", "herald-1")
    assert table.code == 0, table.output
    lines = table.stdout.splitlines()
    events_at = lines.index("events")
    assert any("shout" in line for line in lines[:events_at])  # the steps come first
    rows = [line.split("│") for line in lines[events_at + 3 :] if line.strip()]
    assert [row[1].strip() for row in rows] == [
        "created",
        "step_completed",
        "step_completed",
        "completed",
    ]
    assert [row[3].strip() for row in rows[1:3]] == ["signal news", "activity shout"]


# --- bad input -------------------------------------------------------------------------------


async def test_bad_json_exits_2_and_sends_nothing(engine: Engine, db: Path, tmp_path: Path) -> None:
    untouched = tmp_path / "never-created.db"
    bad = await pyweft(None, "workflows", "signal", "x", "greet", "hello", "--db", str(untouched))
    assert bad.code == 2, bad.output
    line = one_error_line(bad, "BadParameter")
    assert "PAYLOAD_JSON is not valid JSON" in line and "'\"hello\"'" in line
    assert not untouched.exists()  # the store was never even opened

    await engine.start(echo, id="echo-2")
    broken = await pyweft(db, "workflows", "update", "echo-2", "echo", "{oops")
    assert broken.code == 2, broken.output
    one_error_line(broken, "BadParameter")
    query = await pyweft(db, "workflows", "query", "echo-2", "state", "1", "nope")
    assert query.code == 2, query.output
    assert "ARGS_JSON #2 is not valid JSON" in one_error_line(query, "BadParameter")

    fine = await pyweft(db, "workflows", "update", "echo-2", "echo", '"fine"')
    assert fine.code == 0, fine.output
    assert fine.stdout.strip() == '{"got":"fine","n":1}'  # the broken one was never queued


async def test_an_unknown_id_exits_1_with_one_line_naming_the_error(
    engine: Engine, db: Path
) -> None:
    not_found = "error: WorkflowNotFoundError: no workflow run with id 'ghost' exists in this store"
    commands = [
        ("signal", "ghost", "greet", "1"),
        ("query", "ghost", "guest"),
        ("update", "ghost", "ask", "1"),
        ("cancel", "ghost"),
        ("suspend", "ghost"),
        ("resume", "ghost"),
        ("show", "ghost"),
    ]
    done = await asyncio.gather(*(pyweft(db, "workflows", *c) for c in commands))
    for command, result in zip(commands, done, strict=True):
        assert result.code == 1, (command, result.output)
        assert result.stderr.strip() == not_found, (command, result.output)
        assert result.stdout == "", (command, result.output)

    update = await pyweft(db, "workflows", "update-result", "nope")
    assert update.code == 1
    one_error_line(update, "UpdateNotFoundError")
    review = await pyweft(db, "reviews", "decide", "nope", "approved", "--reviewer", "al")
    assert review.code == 1
    one_error_line(review, "ReviewNotFoundError")


# --- control and updates written by another process reach the engine driving the run ---


async def test_cancel_from_another_process_interrupts_the_live_run(
    engine: Engine, db: Path
) -> None:
    handle = await engine.start(concierge, "fay", id="stay-6")
    assert (await pyweft(db, "workflows", "cancel", "stay-6")).code == 0
    with pytest.raises(WorkflowCancelledError):
        await handle.result(timeout=2)


async def test_suspend_from_another_process_stops_the_live_run(engine: Engine, db: Path) -> None:
    await engine.start(concierge, "gus", id="stay-7")
    assert (await pyweft(db, "workflows", "suspend", "stay-7")).code == 0
    await eventually(lambda: not engine.is_running_here("stay-7"), timeout=2, what="it to stop")


async def test_an_on_update_handler_answers_an_update_from_another_process(
    engine: Engine, db: Path
) -> None:
    await engine.start(tally, id="tally-1")
    added = await pyweft(db, "workflows", "update", "tally-1", "add", "2", "--timeout", "2s")
    assert added.code == 0, added.output
    assert added.stdout.strip() == "2"


async def test_resume_from_another_process_is_picked_up_by_the_running_engine(
    engine: Engine, db: Path
) -> None:
    await engine.start(concierge, "hal", id="stay-8")
    assert (await pyweft(db, "workflows", "suspend", "stay-8")).code == 0
    await eventually(lambda: not engine.is_running_here("stay-8"), timeout=2, what="it to stop")
    assert (await pyweft(db, "workflows", "resume", "stay-8")).code == 0
    await eventually(lambda: engine.is_running_here("stay-8"), timeout=2, what="it to resume")
