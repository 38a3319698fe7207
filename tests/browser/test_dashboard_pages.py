"""Every page of the dashboard at 1280x800 and at phone width: it renders, logs no
console error, passes the in-page accessibility check (a11y.js), and is screenshotted.
The main navigation works from the keyboard alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from .kit import Page

pytestmark = pytest.mark.slow

A11Y = (Path(__file__).parent / "a11y.js").read_text()

PAGES = {
    "overview": ("overview", "Runs by status"),
    "runs": ("runs", "run(s) on this page"),
    "run": ("runs/long-run", "Timeline (40 steps)"),
    "run-blocked": ("runs/drifted-run", "Code now asks for"),
    "start": ("start", "Arguments"),
    "reviews": ("reviews", "Reviews"),
    "schedules": ("schedules", "nightly-report"),
    "schedule": ("schedules/nightly-report", "Next fire times"),
    "queues": ("queues", "imports"),
    "workers": ("workers", "shop-labels-1"),
    "system": ("system", "Registry"),
}


@pytest.mark.parametrize("width,height,suffix", [(1280, 800, ""), (390, 844, "-phone")])
def test_every_page_renders_cleanly_and_accessibly(
    page: Page, width: int, height: int, suffix: str
) -> None:
    page.sign_in(page.served.admin_key)
    page.d.set_window_size(width, height)
    page.d.get_log("browser")
    problems: dict[str, list[str]] = {}
    for name, (route, expected) in PAGES.items():
        page.open(route)
        page.wait_text(expected)
        page.shot(name + suffix)
        found = page.d.execute_script(A11Y)
        if found:
            problems[name] = found
        errors = page.console_errors()
        if errors:
            problems[name + " console"] = errors
        overflow = page.d.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        if overflow > 1:
            problems[name + " layout"] = [f"{overflow}px wider than the viewport"]
    assert problems == {}


def test_the_sign_in_page_is_accessible(page: Page) -> None:
    page.d.get(page.served.url + "/")
    page.d.execute_script("sessionStorage.clear()")
    page.d.get(page.served.url + "/?fresh#/signin")
    page.css("#api-key")
    assert page.d.execute_script(A11Y) == []


def test_the_navigation_works_from_the_keyboard(page: Page) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    page.sign_in(page.served.admin_key)
    page.open("overview")
    page.wait_text("Runs by status")
    keys = ActionChains(page.d)
    # From the skip link (the page's first stop): brand, Overview, then Runs.
    page.d.execute_script("document.querySelector('.skip').focus()")
    assert page.d.switch_to.active_element.text == "Skip to content"
    for _ in range(3):
        keys.send_keys(Keys.TAB)
    keys.perform()
    focused = page.d.switch_to.active_element
    assert focused.text == "Runs"
    ActionChains(page.d).send_keys(Keys.ENTER).perform()
    page.until(lambda: page.d.current_url.endswith("#/runs"), "the runs page")
    page.wait_text("run(s) on this page")


def test_the_accessibility_check_reports_what_it_looks_for(page: Page) -> None:
    """The check itself can fail: planted violations are each reported."""
    page.sign_in(page.served.admin_key)
    page.open("system")
    page.wait_text("Registry")
    page.d.execute_script(
        """
        const main = document.querySelector('main');
        main.append(document.createElement('input'));
        const dim = document.createElement('p');
        dim.textContent = 'hard to read';
        dim.style.color = '#222';
        main.append(dim);
        main.append(document.createElement('button'));
        const twin = document.createElement('span');
        twin.id = 'version';
        main.append(twin);
        """
    )
    found = " ".join(page.d.execute_script(A11Y))
    for rule in ("label:", "color-contrast", "button-name:", "duplicate-id-active: #version"):
        assert rule in found, (rule, found)
