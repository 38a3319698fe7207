"""The guides' examples, run on the test kit (``pyweft.testing.TestEnv``).

Each test loads a guide's own example code (``tests/support/guides.py`` takes the
``python`` block from ``docs/guides/<guide>.md`` and keeps its definitions), runs its
workflows on a ``TestEnv`` (memory store, virtual clock) and checks what the guide says
they do. Waits and timeouts that take hours or days in the guides are skipped with the
virtual clock, so every test finishes in milliseconds of real time; where an example
talks to the outside world (a payment provider, a courier, a file), the test supplies a
stand-in for that world or mocks the activity with ``env.mock``.

What does not run here, and why:

- ``sync.md``: ``pyweft.sync.Engine`` is a blocking facade that runs its own engine on a
  private event loop in a thread; the test kit is an async environment around one
  engine, so the facade itself cannot sit on it. The guide's workflow and activity do
  (``test_sync_guide_checkout_*``); the facade is covered by tests/integration.
- ``activities.md`` blocks 2, 5, 6, 7 and 9 are fragments naming an application's own
  types and services (``Order``, ``gateway``, ``FENCED_UPSERT`` on a real SQLite file,
  ``PaymentDeclined``); their behaviour (codecs, typed failures, retry policies,
  attempt tokens, keyed reconciliation) is tested in tests/unit and tests/integration.
  Blocks 1, 3, 4 and 8 run here.
- ``composition.md`` block 2 (``fulfil``) runs its "shipped" branch; its "late" branch
  needs a child that is still busy in an activity after two days, which the test kit
  cannot hold (``advance`` waits for running activities to settle first).
- ``server.md``, ``web-apps.md``, ``deployment.md`` and ``testing.md`` are not in the
  list: the first three drive processes and HTTP (tests/acceptance covers them), and
  the testing guide's examples are written on the test kit already.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pyweft import (
    IdempotencyKeySpentError,
    UpdateRejectedError,
    WorkflowCancelledError,
    WorkflowFailedError,
    WorkflowNotFoundError,
    WorkflowTimeoutError,
    activity,
    activity_context,
    workflow,
)
from pyweft.testing import TestEnv, export_history, replay
from support.guides import fragment, load

START = datetime(2030, 1, 7, tzinfo=UTC)  # a Monday


def elapsed(env: TestEnv) -> timedelta:
    return env.now() - START


# --- signals.md ---------------------------------------------------------------------


async def test_signals_guide_basket_collects_items_and_ignores_a_resent_signal_id() -> None:
    g = load("signals")
    async with TestEnv(workflows=[g.basket], start=START) as env:
        handle, how = await env.engine.start_or_signal(
            g.basket, "ada", signal=("add", "A1"), id="basket-ada", signal_id="click-1"
        )
        await env.engine.signal("basket-ada", "add", "B2", signal_id="click-2")
        await env.engine.signal("basket-ada", "add", "B2", signal_id="click-2")  # a retry
        await handle.signal("add", None)
        assert (how, await env.result(handle)) == ("started", ["A1", "B2"])


async def test_signals_guide_basket_checks_out_after_30_quiet_minutes() -> None:
    g = load("signals")
    async with TestEnv(workflows=[g.basket], start=START, auto_advance=True) as env:
        handle = await env.start(g.basket, "bob", id="basket-bob")
        await env.advance("20 min")
        await handle.signal("add", "C3")  # restarts the 30 minutes
        assert await env.result(handle) == ["C3"]
        assert elapsed(env) == timedelta(minutes=50)


# --- queries-and-updates.md -----------------------------------------------------------


async def test_queries_and_updates_guide_account_answers_and_dedupes_updates() -> None:
    g = load("queries-and-updates")
    async with TestEnv(workflows=[g.account], start=START) as env:
        handle = await env.start(g.account, "ada", id="acct-ada")
        assert await handle.update("deposit", 50, idempotency_key="tx-1") == 50
        assert await handle.update("deposit", 50, idempotency_key="tx-1") == 50  # once
        assert await handle.query("balance") == 50
        with pytest.raises(UpdateRejectedError, match="amount must be positive"):
            await handle.update("deposit", -5)
        assert await handle.update("close") == "closed ada with 50"
        assert await env.result(handle) == 50


# --- conditions.md --------------------------------------------------------------------


async def test_conditions_guide_release_ships_after_two_approvals() -> None:
    g = load("conditions")
    async with TestEnv(workflows=[g.release], start=START) as env:
        handle = await env.start(g.release, 2)
        assert await handle.update("approve", "ann") == 1
        assert await handle.update("approve", "bob") == 2
        assert await env.result(handle) == "shipped"


async def test_conditions_guide_release_gives_up_after_two_days() -> None:
    g = load("conditions")
    async with TestEnv(workflows=[g.release], start=START) as env:
        handle = await env.start(g.release, 2)
        await handle.update("approve", "ann")
        await env.advance("47h")
        assert (await handle.describe()).status == "running"
        await env.advance("1h")
        assert await env.result(handle) == "gave up with ['ann']"


# --- lifecycle.md ---------------------------------------------------------------------


async def test_lifecycle_guide_cancel_runs_the_cleanup_step_and_ends_cancelled() -> None:
    g = load("lifecycle")
    async with TestEnv(workflows=[g.booking], start=START) as env:
        released = env.mock(g.release_seat, returns=None)
        handle = await env.start(g.booking, "LH123", execution_timeout="2 days")
        later = await env.start(g.booking, "BA456", start_delay="1h")
        assert (await later.describe()).status == "pending"
        await env.wait_for(handle, step=1)
        await handle.cancel()
        with pytest.raises(WorkflowCancelledError):
            await env.result(handle)
        assert (await handle.describe()).status == "cancelled"
        assert [c.args for c in released.calls] == [("seat on LH123",)]
        await later.cancel()  # a pending run is cancelled at once
        assert (await later.describe()).status == "cancelled"


async def test_lifecycle_guide_delayed_booking_starts_after_an_hour_and_ends_a_day_later() -> None:
    g = load("lifecycle")
    async with TestEnv(workflows=[g.booking], start=START) as env:
        later = await env.start(g.booking, "BA456", start_delay="1h")
        await env.advance("59 min")
        assert (await later.describe()).status == "pending"
        await env.advance("1 min")
        assert (await later.describe()).status == "running"
        await env.advance("1 day")
        assert await env.result(later) == "seat on BA456"


async def test_lifecycle_guide_execution_timeout_ends_a_booking_that_waits_too_long() -> None:
    g = load("lifecycle")
    async with TestEnv(workflows=[g.booking], start=START, auto_advance=True) as env:
        handle = await env.start(g.booking, "LH123", execution_timeout="12h")
        with pytest.raises(WorkflowTimeoutError):
            await env.result(handle)
        info = await handle.describe()
        assert info.status == "timed_out"
        assert elapsed(env) == timedelta(hours=12)


# --- human-review.md ------------------------------------------------------------------


async def test_human_review_guide_publish_is_approved_by_the_reviewer() -> None:
    g = load("human-review")
    async with TestEnv(workflows=[g.publish], start=START) as env:
        handle = await env.start(g.publish, "Hello, world")
        [review] = await env.engine.list_reviews(workflow_id=handle.id)
        assert (review.review_type, review.reviewers) == ("copy", ["ed"])
        assert review.artifact == {"text": "Hello, world"}
        await env.engine.submit_review(
            review.review_id, "approved", reviewer="ed", feedback="ship it"
        )
        assert await env.result(handle) == "published, approved by ed"


async def test_human_review_guide_escalates_after_4h_and_times_out_after_2_days() -> None:
    g = load("human-review")
    async with TestEnv(workflows=[g.publish], start=START) as env:
        handle = await env.start(g.publish, "Hello, world")
        await env.advance("4h")
        [review] = await env.engine.list_reviews(workflow_id=handle.id)
        assert "lead" in review.reviewers
        await env.advance("44h")
        assert await env.result(handle) == "nobody decided"


# --- events-and-history.md ------------------------------------------------------------


async def test_events_and_history_guide_checkout_streams_events_and_keeps_history() -> None:
    g = load("events-and-history")
    async with TestEnv(workflows=[g.checkout], start=START) as env:
        stream = env.engine.events()
        handle = await env.start(g.checkout, 4200)
        await handle.signal("shipped")
        assert await env.result(handle) == "receipt-4200"
        kinds = []
        async for event in stream:
            kinds.append(event.kind)
            if event.kind == "completed":
                break
        history = await handle.history()
    assert kinds[0] == "started" and kinds[-1] == "completed"
    assert "step_completed" in kinds and "signal_received" in kinds
    assert [(s.kind, s.name, s.result) for s in history.steps] == [
        ("activity", "charge", "receipt-4200"),
        ("signal", "shipped", None),
    ]
    assert history.events[0].kind == "created" and history.events[-1].kind == "completed"


# --- composition.md -------------------------------------------------------------------


async def test_composition_guide_order_ships_with_the_cheaper_vendor_as_a_child() -> None:
    g = load("composition", 1)
    async with TestEnv(workflows=[g.order, g.ship], start=START) as env:
        handle = await env.start(g.order, id="order-1")
        await handle.signal("confirm")
        assert await env.result(handle) == "shipped by globex"
        children = await env.engine.list(parent_id="order-1")
        assert [c.id for c in children.items] == ["order-1/6"]


async def test_composition_guide_order_quote_expires_after_an_hour() -> None:
    g = load("composition", 1)
    async with TestEnv(workflows=[g.order, g.ship], start=START, auto_advance=True) as env:
        handle = await env.start(g.order, id="order-2")
        assert await env.result(handle) == "quote expired"
        assert elapsed(env) == timedelta(hours=1)


async def test_composition_guide_fulfil_races_a_child_against_two_days() -> None:
    @activity
    async def print_label(order_id: str) -> str:
        raise AssertionError("the courier's label printer is mocked in tests")

    @activity
    async def book_courier(label: str) -> str:
        raise AssertionError("the courier is mocked in tests")

    from pyweft import WorkflowContext

    g = load("composition", 2, workflow=workflow, WorkflowContext=WorkflowContext,
             print_label=print_label, book_courier=book_courier)  # fmt: skip
    async with TestEnv(workflows=[g.fulfil, g.ship], start=START) as env:
        env.mock(print_label, side_effect=lambda order_id: f"label-{order_id}")
        courier = env.mock(book_courier, side_effect=lambda label: f"booked {label}")
        handle = await env.start(g.fulfil, "o-7")
        assert await env.result(handle) == "booked label-o-7"
        assert [c.args for c in courier.calls] == [("label-o-7",)]


async def test_composition_guide_saga_compensates_in_reverse_order() -> None:
    g = load("composition", 3)
    async with TestEnv(workflows=[g.trip], start=START) as env:
        released = env.mock(g.release, returns=None)
        handle = await env.start(g.trip)
        assert await env.result(handle) == "rolled back: no cars left"
        assert [c.args for c in released.calls] == [("hotel-42",), ("flight-42",)]


# --- determinism-and-versioning.md ----------------------------------------------------


async def test_determinism_guide_fork_reuses_the_memo_and_sends_the_invoice() -> None:
    g = load("determinism-and-versioning")
    g.mail_is_down = True
    async with TestEnv(workflows=[g.invoice], start=START, auto_advance=True) as env:
        first = await env.start(g.invoice, "o-1")
        with pytest.raises(WorkflowFailedError) as failed:
            await env.result(first)
        assert failed.value.error_type == "ActivityError"
        number = (await first.history()).steps[0].result
        assert number.startswith("INV-")
        g.mail_is_down = False
        retry = await env.engine.fork(first.id, from_step=2)  # reuse steps 1-2, rerun 3
        assert await env.result(retry) == f"sent {number} for o-1"


async def test_determinism_guide_history_replays_on_the_same_code_and_not_on_reordered_code() -> (
    None
):
    g = load("determinism-and-versioning")
    g.mail_is_down = False
    async with TestEnv(workflows=[g.invoice], start=START) as env:
        handle = await env.start(g.invoice, "o-2")
        await env.result(handle)
        history = await export_history(env.engine, handle.id)
    assert (await replay(history, [g.invoice])).ok

    @workflow(name="invoice")
    async def reordered(ctx: Any, order_id: str) -> str:
        await ctx.run(g.audit, order_id)  # now before the memo: step 1 differs
        number = await ctx.memo("number", lambda: "INV-x")
        return await ctx.run(g.send_invoice, order_id, number)

    found = await replay(history, [reordered])
    assert not found.ok and found.step == 1


# --- visibility.md --------------------------------------------------------------------


async def test_visibility_guide_lists_runs_by_attributes_tags_and_pages() -> None:
    g = load("visibility")
    async with TestEnv(workflows=[g.order], start=START) as env:
        engine = env.engine
        for n, (region, cents) in enumerate([("eu", 5_000), ("us", 25_000), ("eu", 12_000)]):
            handle = await env.start(g.order, region, cents, id=f"order-{n}", tags=["web"])
            await env.result(handle)
            await env.advance("1s")  # distinct creation times: "newest first" is defined

        def ids(page: Any) -> list[str]:
            return [info.id for info in page.items]

        assert ids(await engine.list(attributes={"region": "eu"})) == ["order-2", "order-0"]
        assert ids(await engine.list(attributes={"amount": {"gte": 100}, "vip": True})) == [
            "order-2",
            "order-1",
        ]
        flt = {"status": ["completed", "failed"], "id_prefix": "order-", "tags": ["web"]}
        assert ids(await engine.list(**flt, attributes={"labels": "us"})) == ["order-1"]
        await engine.set_attributes("order-0", {"region": "apac", "vip": None})
        attributes = (await engine.describe("order-0")).attributes
        assert attributes["region"] == "apac" and "vip" not in attributes
        cursor, seen = None, []
        while True:
            page = await engine.list(workflow_type="order", limit=2, cursor=cursor)
            seen += ids(page)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == ["order-2", "order-1", "order-0"]


# --- retention.md ---------------------------------------------------------------------


async def test_retention_guide_sweeps_on_the_virtual_clock_by_type_and_by_status() -> None:
    g = load("retention")
    async with TestEnv(
        workflows=[g.ping, g.report],
        start=START,
        retention={"completed": "7d", "failed": "30d"},
        retention_sweep_interval="1d",
    ) as env:
        first = await env.start(g.ping, idempotency_key="ping-1")
        await env.result(first)
        report = await env.start(g.report)
        await env.result(report)
        await env.advance("1d")  # the first sweep: ping's 1 hour has passed
        with pytest.raises(WorkflowNotFoundError):
            await first.describe()
        with pytest.raises(IdempotencyKeySpentError) as spent:
            await env.engine.start(g.ping, idempotency_key="ping-1")
        assert spent.value.workflow_id == first.id
        assert (await report.describe()).status == "completed"
        await env.advance("6d")  # seven days: the engine-wide rule takes report too
        with pytest.raises(WorkflowNotFoundError):
            await report.describe()


# --- activities.md --------------------------------------------------------------------


async def test_activities_guide_a_bound_method_is_an_activity() -> None:
    g = load("activities", 1)
    async with TestEnv(workflows=[g.order], activities=[g.shop.reserve], start=START) as env:
        handle = await env.start(g.order, "sku-1")
        assert await env.result(handle) == "postgresql://shop:sku-1"


class FlakyPayments:
    """A payment provider that fails the first call, and dedupes by idempotency key."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.charged: dict[str, str] = {}

    async def charge(self, order_id: str, cents: int, *, idempotency_key: str) -> str:
        self.keys.append(idempotency_key)
        if len(self.keys) == 1:
            raise ConnectionError("provider timed out")
        return self.charged.setdefault(idempotency_key, f"paid {order_id} {cents}")


async def test_activities_guide_charge_uses_one_key_for_every_attempt() -> None:
    from pyweft import RetryPolicy

    payments = FlakyPayments()
    g = load("activities", 3, RetryPolicy=RetryPolicy, payments=payments)

    @workflow(name="pay")
    async def pay(ctx: Any, order_id: str) -> str:
        return await ctx.run(g.charge, order_id, 500)

    async with TestEnv(workflows=[pay], start=START, auto_advance=True) as env:
        handle = await env.start(pay, "o-9", id="pay-o-9")
        assert await env.result(handle) == "paid o-9 500"
    assert payments.keys == ["pay-o-9/1", "pay-o-9/1"]  # the retry after a backoff


async def test_activities_guide_import_rows_resumes_from_its_heartbeat() -> None:
    from pyweft import RetryPolicy

    stored: list[str] = []
    failures = ["once"]

    def store(row: str) -> None:
        if row == "r3" and failures:
            failures.pop()
            raise OSError("disk full")
        stored.append(row)

    g = load(
        "activities",
        4,
        RetryPolicy=RetryPolicy,
        activity=activity,
        activity_context=activity_context,
        read_rows=lambda path: [f"r{n}" for n in range(5)],
        store=store,
    )

    @workflow(name="importer")
    async def importer(ctx: Any, path: str) -> int:
        return await ctx.run(g.import_rows, path)

    async with TestEnv(workflows=[importer], start=START, auto_advance=True) as env:
        handle = await env.start(importer, "rows.csv")
        assert await env.result(handle) == 5
    assert stored == ["r0", "r1", "r2", "r3", "r4"]  # the retry did not redo r0..r2


async def test_activities_guide_async_completion_waits_for_the_webhook() -> None:
    from pyweft import ApplicationError

    sent: list[tuple[str, str]] = []

    class ESign:
        async def send(self, doc_id: str, *, callback_token: str) -> None:
            sent.append((doc_id, callback_token))

    g = load(
        "activities",
        8,
        activity=activity,
        activity_context=activity_context,
        esign=ESign(),
        ApplicationError=ApplicationError,
    )

    @workflow(name="contract")
    async def contract(ctx: Any, doc_id: str) -> Any:
        return await ctx.run(g.request_signature, doc_id)

    async with TestEnv(workflows=[contract], start=START) as env:
        handle = await env.start(contract, "doc-1")
        [(doc_id, token)] = sent
        assert doc_id == "doc-1"
        await env.advance("50 min")
        await env.engine.heartbeat_activity(token, {"viewed": True})  # alive: 1h more
        await env.advance("50 min")
        assert (await handle.describe()).status == "running"
        await env.engine.complete_activity(token, {"signed_by": "ana"})
        assert await env.result(handle) == {"signed_by": "ana"}


# --- schedules.md ---------------------------------------------------------------------


async def test_schedules_guide_morning_report_fires_on_weekdays_at_nine_in_berlin() -> None:
    g = load("schedules", 1)
    async with TestEnv(workflows=[g.morning_report], start=START) as env:
        await env.advance("7 days")
        page = await env.engine.list(schedule_id="morning_report")
        infos = [(await env.engine.describe(r.id)).schedule for r in page.items]
        nominal = sorted(infos, key=lambda s: s.nominal_time)
    berlin_nine_in_winter = [
        datetime(2030, 1, day, 8, tzinfo=UTC) for day in (7, 8, 9, 10, 11)
    ]  # Monday to Friday; 09:00 CET is 08:00 UTC
    assert [s.nominal_time for s in nominal] == berlin_nine_in_winter


async def test_schedules_guide_create_schedule_runs_nightly_with_jitter_and_reports_misses() -> (
    None
):
    @workflow(name="export_orders")
    async def export_orders(ctx: Any, region: str) -> str:
        return f"exported {region} for {ctx.info.nominal_time:%Y-%m-%d}"

    create = fragment("schedules", 2, export_orders=export_orders)
    alerts: list[str] = []
    watch = fragment("schedules", 3, alert=alerts.append)
    async with TestEnv(workflows=[export_orders], start=START) as env:
        watcher = asyncio.ensure_future(watch(env.engine))
        await create(env.engine)
        await env.advance("2 days")
        page = await env.engine.list(schedule_id="nightly-eu")
        runs = sorted(page.items, key=lambda r: r.id)
        assert [r.id for r in runs] == [
            "nightly-eu@2030-01-07T01:30:00Z",  # 02:30 in Berlin
            "nightly-eu@2030-01-08T01:30:00Z",
        ]
        for run in runs:
            started = run.created_at - datetime.fromisoformat(run.id.split("@")[1])
            assert timedelta(0) <= started < timedelta(minutes=5)  # the jitter
        assert await env.result(runs[0].id) == "exported eu for 2030-01-07"
        env.clock.advance(5 * 86400)  # as if no engine ran for five nights
        await env.settle()
        watcher.cancel()
    assert alerts == ["nightly-eu missed 4 runs from 2030-01-09T01:30:00Z to 2030-01-12T01:30:00Z"]


# --- state.md -------------------------------------------------------------------------


async def test_state_guide_fifty_invoices_at_once_get_distinct_numbers() -> None:
    from pyweft import StateConflictError

    g = load("state", 1, StateConflictError=StateConflictError)
    async with TestEnv(workflows=[g.send_invoice], start=START) as env:
        handles = [await env.engine.start(g.send_invoice, f"c{n}") for n in range(50)]
        numbers = [await env.result(h) for h in handles]
    assert sorted(numbers) == list(range(1001, 1051))


async def test_state_guide_restock_holds_the_supplier_lock_one_run_at_a_time() -> None:
    from pyweft import WorkflowContext

    @activity
    async def place_order(supplier: str) -> None:
        raise AssertionError("the supplier is mocked in tests")

    g = load("state", 2, workflow=workflow, WorkflowContext=WorkflowContext,
             place_order=place_order)  # fmt: skip
    async with TestEnv(workflows=[g.restock], start=START) as env:
        holders: list[int] = []

        async def order(supplier: str) -> None:
            holders.append(len((await env.engine.inspect_lock(f"supplier-{supplier}"))["holders"]))

        placed = env.mock(place_order, side_effect=order)
        first = await env.engine.start(g.restock, "42")
        second = await env.engine.start(g.restock, "42")
        await env.result(first)
        await env.result(second)
        assert placed.call_count == 2 and holders == [1, 1]
        assert (await env.engine.inspect_lock("supplier-42"))["holders"] == []


# --- sync.md --------------------------------------------------------------------------


async def test_sync_guide_checkout_returns_the_receipt_and_the_approval() -> None:
    g = load("sync", 1)
    async with TestEnv(workflows=[g.checkout], start=START) as env:
        handle = await env.start(g.checkout, 4200)
        await handle.signal("approval", {"ok": True})
        assert await env.result(handle) == {"receipt": "receipt-4200", "approval": {"ok": True}}


async def test_sync_guide_checkout_fails_when_nobody_approves_within_three_days() -> None:
    g = load("sync", 1)
    async with TestEnv(workflows=[g.checkout], start=START, auto_advance=True) as env:
        handle = await env.start(g.checkout, 4200)
        with pytest.raises(WorkflowFailedError) as failed:
            await env.result(handle)
        assert failed.value.error_type == "WaitTimeoutError"
        assert elapsed(env) == timedelta(days=3)


def test_every_listed_guide_has_a_test_here() -> None:
    names = {
        "signals", "queries_and_updates", "conditions", "lifecycle", "human_review",
        "events_and_history", "composition", "determinism", "visibility", "retention",
        "activities", "schedules", "state", "sync",
    }  # fmt: skip
    tests = [n for n in globals() if n.startswith("test_")]
    assert {n for n in names if not any(t.startswith(f"test_{n}_guide") for t in tests)} == set()
