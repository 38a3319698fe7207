"""Clicking through the dashboard in headless Chromium against a real ``pyweft serve``:
start a run from its form, follow it live, signal it, approve its review, see it
complete in the timeline; filter the runs list; fork from a step; pause a schedule;
drain and resume a real ``pyweft worker`` process."""

from __future__ import annotations

import json

import httpx
import pytest

from .conftest import WORKER_ID
from .kit import Page

pytestmark = pytest.mark.slow


def test_a_run_started_from_its_form_is_followed_live_to_completion(page: Page) -> None:
    page.sign_in(page.served.admin_key)
    page.open("start?type=checkout")
    form = page.css("#start-form")
    form.find_element("css selector", "textarea[name=order]").send_keys(
        json.dumps({"sku": "ui-sku", "quantity": 2})
    )
    priority = form.find_element("css selector", "input[name=priority]")
    priority.clear()
    priority.send_keys("3")
    page.css("#start-id").send_keys("ui-order")
    page.shot("start")
    page.click("#start-submit")

    page.until(lambda: page.d.current_url.endswith("#/runs/ui-order"), "the run page")
    # The charge step lands in the timeline while the run waits for its signal.
    page.until(lambda: page.all('#timeline [data-step="1"]'), "step 1 in the timeline")
    page.wait_text("charge", "#timeline")
    page.wait_text("running", "#run-summary")
    page.click('#timeline [data-step="1"] summary')  # the charge step's result
    page.wait_text('"charged": 20', '#timeline [data-step="1"]')

    # The run waits for "packed" (wait_for_signal, untyped): offered by name, raw JSON.
    choice = page.css("#signal-form select[name=name-choice]", timeout=15)
    assert choice.get_attribute("value") == "packed"
    form = page.css("#signal-form")
    form.find_element("css selector", "textarea[name=payload]").send_keys('{"box": 7}')
    form.find_element("css selector", "button").click()
    # Live: the signal's step and then the review request appear without a reload.
    page.until(lambda: page.all('#timeline [data-step="3"]'), "the review step, live")
    page.wait_text("Pending reviews")
    # The step the user opened is still open after the live redraws.
    assert page.attribute('#timeline [data-step="1"]', "open") is not None
    assert '"charged": 20' in page.text('#timeline [data-step="1"]')
    page.shot("run-waiting-for-review")

    page.open("reviews")
    card = page.css('article[aria-label="ship-it for ui-order"]')
    assert "ui-sku" in card.text  # the artifact is rendered
    page.shot("reviews")
    card.find_element("css selector", "textarea").send_keys("looks right")
    card.find_element("css selector", "button[id^=approved-]").click()
    page.wait_text("Inbox zero")

    page.open("runs/ui-order")
    page.wait_text("completed", "#run-summary", timeout=15)
    page.wait_text("shipped ui-sku", "#run-result")
    timeline = page.text("#timeline")
    assert "ship" in timeline and "open" not in timeline
    page.click('#timeline [data-step="4"] summary')  # the ship step's result
    page.wait_text("shipped ui-sku", '#timeline [data-step="4"]')
    page.shot("run-completed")
    assert page.served.api("GET", "/workflows/ui-order").json()["result"]["priority"] == 3
    assert page.console_errors() == []


def test_the_runs_list_filters_by_status_and_keeps_the_filter_in_the_url(page: Page) -> None:
    page.sign_in(page.served.admin_key)
    page.open("runs")
    page.css("#runs-table tbody tr")
    select = page.css("select[name=status]")
    select.find_element("css selector", "option[value=completed]").click()
    page.click("#apply-filters")
    page.until(lambda: "status=completed" in page.d.current_url, "the filter in the URL")
    page.until(
        lambda: {r.text for r in page.all("#runs-table td.status")} == {"completed"},
        "only completed rows",
    )
    listed = {r.get_attribute("data-id") for r in page.all("#runs-table tbody tr")}
    assert {"long-run", "bad-run"} <= listed and "order-0" not in listed
    page.d.refresh()  # the URL alone brings the same view back
    page.until(
        lambda: page.css("select[name=status]").get_attribute("value") == "completed",
        "the kept filter",
    )
    page.shot("runs-filtered")

    page.open("runs")
    page.css("#runs-table tbody tr")
    page.css("input[name=attribute]").send_keys("region=eu")
    page.click("#apply-filters")
    page.until(lambda: "attribute.region=eu" in page.d.current_url, "the attribute in the URL")
    page.until(
        lambda: (
            [r.get_attribute("data-id") for r in page.all("#runs-table tbody tr")] == ["order-0"]
        ),
        "only the run in region eu",
    )
    assert page.console_errors() == []


def test_a_run_forked_from_a_chosen_step_keeps_the_steps_up_to_it(page: Page) -> None:
    page.sign_in(page.served.admin_key)
    page.open("runs/long-run")
    page.click('#fork-step option[value="5"]')
    page.click("#fork-run")
    page.confirm()
    page.until(lambda: "#/runs/long-run" not in page.d.current_url, "the forked run's page")
    page.wait_text("Forked from long-run at step 5", "#lineage")
    page.wait_text("completed", "#run-summary", timeout=15)
    new_id = page.d.current_url.rsplit("/", 1)[-1]
    info = page.served.api("GET", f"/workflows/{new_id}").json()
    assert info["forked_from"] == "long-run" and info["forked_at_step"] == 5
    assert info["result"] == sum(range(40))
    assert page.console_errors() == []


def test_a_schedule_is_paused_and_resumed_from_its_list(page: Page) -> None:
    page.sign_in(page.served.admin_key)
    page.open("schedules")
    page.click("#pause-nightly-report")
    page.until(lambda: page.all("#resume-nightly-report"), "the resume button")
    assert page.served.api("GET", "/schedules/nightly-report").json()["schedule"]["paused"]
    page.shot("schedules")
    page.open("schedules/nightly-report")
    page.wait_text("Paused: nothing fires.")
    page.shot("schedule-detail")
    page.click("#resume-nightly-report")
    page.until(lambda: page.all("#next-fires li"), "the next fire times")
    assert not page.served.api("GET", "/schedules/nightly-report").json()["schedule"]["paused"]
    assert page.console_errors() == []


def test_a_schedule_is_created_edited_and_deleted_from_forms(page: Page) -> None:
    page.sign_in(page.served.admin_key)
    page.open("schedules")
    page.click("details.card > summary")  # open "New schedule"
    page.css("#new-schedule-id").send_keys("ui-every")
    page.css('#new-schedule-type option[value="nightly"]').click()
    page.css("#new-schedule input[name=every]").send_keys("2h")
    page.click("#create-schedule")
    page.until(lambda: page.all('tr[data-schedule="ui-every"]'), "the new schedule's row")
    made = page.served.api("GET", "/schedules/ui-every").json()["schedule"]
    assert made["every_s"] == 7200 and made["workflow_type"] == "nightly"

    page.open("schedules/ui-every")
    every = page.css("#edit-schedule input[name=every]")
    every.clear()
    every.send_keys("3h")
    page.css('#edit-schedule option[value="allow_all"]').click()
    page.click("#save-schedule")
    page.until(
        lambda: (
            page.served.api("GET", "/schedules/ui-every").json()["schedule"]["every_s"] == 10800
        ),
        "the saved interval",
    )
    page.wait_text("allow_all")
    page.click("#delete-schedule")
    page.confirm()
    page.until(lambda: page.d.current_url.endswith("#/schedules"), "back to the list")
    assert page.served.api("GET", "/schedules/ui-every").status_code == 404
    assert page.console_errors() == []


def test_actions_a_key_may_not_take_are_disabled_with_the_reason(page: Page) -> None:
    page.sign_in(page.served.read_key)
    page.open("runs/order-1")
    cancel = page.css("#cancel-run")
    assert not cancel.is_enabled()
    gated = cancel.find_element("xpath", "..")
    assert "needs workflows:write" in gated.text
    signal_button = page.css("#signal-form button")
    assert not signal_button.is_enabled() and "signals:write" in page.text("#signal-form")
    page.shot("run-read-only")
    page.open("start")
    page.wait_text("needs workflows:write")
    assert page.console_errors() == []


def test_a_worker_is_drained_and_resumed_from_the_workers_page(page: Page) -> None:
    row = f'#workers tr[data-worker="{WORKER_ID}"]'
    page.sign_in(page.served.read_key)
    page.open("workers")
    page.wait_text(WORKER_ID, "#workers")
    drain = page.css(f"#drain-{WORKER_ID}")
    assert not drain.is_enabled() and "needs workers:write" in page.text(row)

    page.sign_in(page.served.admin_key)
    page.open("workers")
    page.wait_text("active", row)
    assert "labels" in page.text(row) and "0 / 4" in page.text(row)
    page.click(f"#drain-{WORKER_ID}")
    page.confirm()
    # The worker process reads the request at its next heartbeat (every 5 s) and says so.
    page.wait_text("drained", row, timeout=20)
    page.shot("workers-drained")
    [info] = [w for w in page.served.api("GET", "/workers").json()["items"] if w["id"] == WORKER_ID]
    assert info["status"] == "drained" and info["drain_requested"] is True

    page.click(f"#resume-{WORKER_ID}")
    # The request is withdrawn at once (the worker claims again from its next heartbeat).
    page.until(lambda: page.all(f"#drain-{WORKER_ID}"), "the drain button back")
    [info] = [w for w in page.served.api("GET", "/workers").json()["items"] if w["id"] == WORKER_ID]
    assert info["drain_requested"] is False
    page.open("queues")
    page.wait_text("labels", "#activity-queues")
    assert "imports" in page.text("#queues")
    page.open("overview")
    page.wait_text("1 worker(s)", "#overview-queues")
    assert "imports" in page.text("#overview-queues")
    assert page.console_errors() == []


def test_a_running_activitys_heartbeat_progress_shows_on_its_timeline(page: Page) -> None:
    body = {"type": "packing", "args": [5], "id": "pack-1"}
    assert page.served.api("POST", "/workflows", json=body).status_code == 201
    try:
        page.sign_in(page.served.admin_key)
        page.open("runs/pack-1")
        page.wait_text('progress: {"packed":2,"of":5}', "#timeline", timeout=15)
        page.click('#timeline [data-step="1"] summary')
        page.wait_text('"packed": 2', '#timeline [data-step="1"]')
        page.shot("run-heartbeat")
        assert page.console_errors() == []
    finally:
        page.served.api("POST", "/workflows/pack-1/cancel")


def test_a_rejected_key_goes_back_to_sign_in(page: Page) -> None:
    page.d.get(page.served.url + "/")
    page.d.execute_script("sessionStorage.setItem('pyweft.apiKey', 'pwk_nope_nope')")
    page.open("runs")
    page.until(lambda: "#/signin" in page.d.current_url, "the sign-in page")
    page.css("#api-key").send_keys("pwk_still_wrong")
    page.click("#signin-submit")
    page.wait_text("was not accepted", "#signin-error")
    page.shot("signin")
    page.css("#api-key").clear()
    page.css("#api-key").send_keys(page.served.admin_key)
    page.click("#signin-submit")
    page.until(lambda: page.d.current_url.endswith("#/runs"), "the page asked for first")


def test_runs_selected_by_the_filters_are_cancelled_in_bulk_after_a_dry_run(page: Page) -> None:
    paths = httpx.get(page.served.url + "/openapi.json").json()["paths"]
    if not any(p.endswith("/bulk/{operation}") for p in paths):
        pytest.skip("this server has no bulk routes; the panel is hidden until it does")
    for i in range(2):
        body = {"type": "checkout", "args": [{"sku": f"b{i}", "quantity": 1}], "id": f"bulk-{i}",
                "tags": ["bulk-me"]}  # fmt: skip
        assert page.served.api("POST", "/workflows", json=body).status_code == 201
    page.sign_in(page.served.admin_key)
    page.open("runs?tag=bulk-me")
    page.until(lambda: len(page.all("#runs-table tbody tr")) == 2, "the two tagged runs")
    page.click("#bulk > summary")
    page.css('#bulk-operation option[value="cancel"]').click()
    page.click("#bulk-preview")
    page.wait_text("2 run(s) match", "#bulk-outcome")
    page.shot("runs-bulk")
    page.click("#bulk-commit")
    page.confirm()
    page.wait_text("2 applied", "#bulk-outcome")
    for i in range(2):
        page.until(
            lambda i=i: (
                page.served.api("GET", f"/workflows/bulk-{i}").json()["status"] == "cancelled"
            ),
            f"bulk-{i} cancelled",
        )
    assert page.console_errors() == []
