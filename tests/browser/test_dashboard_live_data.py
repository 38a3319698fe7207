"""The run page's code-drift diff and schema-generated message forms, and the metrics
charts, in headless Chromium against a real ``pyweft serve``: a run recorded by older
code shows what its journal holds beside what the code asks for; a typed signal filled
in through its generated form reaches the run with its types; the charts fill with
data points as runs start."""

from __future__ import annotations

import time

import pytest

from .kit import Page

pytestmark = pytest.mark.slow


def test_a_blocked_runs_drift_is_shown_side_by_side(page: Page) -> None:
    page.sign_in(page.served.admin_key)
    page.open("runs/drifted-run")
    page.wait_text("blocked", "#run-summary", timeout=15)
    assert page.text("#drift-row").startswith("#2")
    was, now = page.text("#drift-row td.was"), page.text("#drift-row td.now")
    assert "activity tell_team" in was and "completed" in was
    assert "activity weigh_stock" in now and "(str, int)" in now
    diff = page.text("#drift-diff")
    assert "at step 2" in diff
    assert "#1 activity count_stock — completed the same (replayed from the journal)" in diff
    assert page.css("#resume-run").is_enabled()  # the way out is one click away
    page.shot("run-blocked-diff")
    assert page.console_errors() == []


def test_a_signal_sent_through_its_generated_form_reaches_the_run(page: Page) -> None:
    made = page.served.api(
        "POST", "/workflows", json={"type": "restocking", "args": ["sku-r"], "id": "restock-1"}
    )
    assert made.status_code in (200, 201), made.text
    page.sign_in(page.served.admin_key)
    page.open("runs/restock-1")
    choice = page.css("#signal-form select[name=name-choice]", timeout=15)
    assert choice.get_attribute("value") == "restock"
    # Its query takes no arguments: the generated form says so and asks it.
    assert page.css("#query-form select[name=name-choice]").get_attribute("value") == "received"
    assert "takes no arguments" in page.text("#query-form")
    page.click("#query-form button")
    page.wait_text("0", "#query-form pre.reply")
    # The update's one argument gets a text field; its answer is shown.
    update = page.css("#update-form")
    update.find_element("css selector", 'input[name="text"]').send_keys("call first")
    update.find_element("css selector", "#update-form > button").click()
    page.wait_text('"noted call first"', "#update-form pre.reply")
    form = page.css("#signal-form")

    def field(name: str) -> object:
        return form.find_element("css selector", f'[name="{name}"]')

    field("order.sku").send_keys("sku-r")
    field("order.quantity").send_keys("4")
    field("order.urgent").click()
    field("order.colour").find_element("css selector", "option[value='\"blue\"']").click()
    field("order.ship_to.city").send_keys("Lyon")
    for _ in range(2):
        form.find_element("css selector", '[data-add="order.tags"]').click()
    tags = form.find_elements("css selector", '[name="order.tags[]"]')
    tags[0].send_keys("spring")
    tags[1].send_keys("sale")
    # The raw-JSON view shows what the fields make, and switching back keeps them.
    form.find_element("css selector", "input[name=raw-json]").click()
    raw = form.find_element("css selector", "textarea[name=payload]").get_attribute("value")
    assert '"quantity": 4' in raw and '"city": "Lyon"' in raw
    form.find_element("css selector", "input[name=raw-json]").click()
    page.d.execute_script("document.getElementById('signal-form').scrollIntoView()")
    page.shot("run-signal-form")
    form.find_element("css selector", "#signal-form > span > button, #signal-form > button").click()

    page.wait_text("completed", "#run-summary", timeout=15)
    result = page.served.api("GET", "/workflows/restock-1").json()["result"]
    assert result == {
        "sku": "sku-r",
        "quantity": 4,
        "urgent": True,
        "colour": "blue",
        "tags": ["spring", "sale"],
        "ship_to": {"city": "Lyon", "zip_code": None},
    }
    assert page.console_errors() == []


def test_the_metrics_charts_fill_with_data_points_as_runs_start(page: Page) -> None:
    page.sign_in(page.served.admin_key)
    page.open("system")
    page.css("#chart-runs svg")
    deadline = time.monotonic() + 30
    started = 0
    while time.monotonic() < deadline:
        # Keep runs starting so each sampling interval sees some.
        page.served.api("POST", "/workflows", json={"type": "many_steps", "args": [2]})
        started += 1
        points = page.all('#chart-runs g[data-series="started"] circle')
        legend = page.text('#chart-runs li[data-series="started"] strong')
        if len(points) >= 2 and legend not in ("0", "—"):
            break
        time.sleep(0.5)
    else:
        raise AssertionError(
            f"no runs chart after {started} starts: {page.text('#metrics-charts')}"
        )
    assert "MetricsInterceptor counters" in page.text("#chart-runs")
    page.until(
        lambda: len(page.all('#chart-activities g[data-series="mean"] circle')) >= 1,
        "activity durations",
        timeout=20,
    )
    assert page.all('#chart-queues g[data-series="imports"] circle')
    page.shot("system-metrics")
    page.open("overview")
    page.until(lambda: len(page.all("#chart-runs circle")) >= 2, "the overview's chart", timeout=20)
    page.shot("overview-charts")
    assert page.console_errors() == []


def test_pages_left_for_another_document_close_their_live_feeds(page: Page) -> None:
    """Chrome keeps a page the user leaves in its back/forward cache, whole. A live feed
    left open there holds one of the six connections Chrome allows per host, so after a
    few page loads the next page's own requests waited (about a minute) behind them."""
    page.sign_in(page.served.admin_key)
    page.d.set_page_load_timeout(10)  # a page stuck behind held connections fails here
    try:
        for visit in range(8):  # more pages than connections: each goes to the cache
            page.d.get(f"{page.served.url}/?visit={visit}#/runs")
            page.wait_text("● live", "#runs-live")
        # Back to the page from the cache: it follows the runs again.
        page.d.back()
        page.until(lambda: "visit=6" in page.d.current_url, "the page before")
        page.wait_text("● live", "#runs-live")
        body = {"type": "many_steps", "args": [1], "id": "after-back", "tags": ["back"]}
        assert page.served.api("POST", "/workflows", json=body).status_code == 201
        page.until(lambda: page.all('#runs-table tr[data-id="after-back"]'), "the new run, live")
    finally:
        page.d.set_page_load_timeout(300)
    assert page.console_errors() == []
