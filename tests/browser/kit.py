"""What the browser tests share: the served app's address and keys, and ``Page``, the
browser on the dashboard with waits that poll until a deadline."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
SHOTS = Path(os.environ.get("PYWEFT_SCREENSHOTS", ROOT / "build" / "dashboard-screenshots"))

_REQUESTS = """return performance.getEntriesByType('resource').slice(-25).map((e) =>
  `  ${e.startTime.toFixed(0)}+${e.duration.toFixed(0)} ${e.initiatorType} ${e.name}`
).join('\\n')"""


@dataclass
class Served:
    url: str
    db: str
    admin_key: str
    read_key: str
    logs: tuple[Path, ...] = ()  # the server's and the worker's output, for failure reports

    def api(self, method: str, path: str, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.admin_key}"}
        return httpx.request(method, self.url + "/api/v1" + path, headers=headers, **kw)


class Page:
    """The browser on the dashboard, with waits that poll until a deadline."""

    def __init__(self, driver: Any, served: Served) -> None:
        self.d = driver
        self.served = served
        self.console: list[dict[str, Any]] = []  # every console entry read so far

    def open(self, route: str) -> None:
        self.d.get(f"{self.served.url}/#/{route}")

    def sign_in(self, key: str) -> None:
        self.d.get(self.served.url + "/?fresh#/signin")  # a full load, not a hash change
        self.css("#api-key")
        self.d.execute_script("sessionStorage.clear()")
        self.css("#api-key").send_keys(key)
        self.css("#signin-submit").click()
        self.until(lambda: "#/signin" not in self.d.current_url, "sign-in to finish")

    def until(self, check: Any, what: str, timeout: float = 10.0) -> Any:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                value = check()
                if value:
                    return value
            except Exception as exc:  # the element is not there (yet), or went stale
                last = exc
            time.sleep(0.05)
        main = self.d.execute_script("return document.body.innerText.slice(0, 600)")
        raise AssertionError(
            f"timed out waiting for {what} ({last!r}) at {self.d.current_url}; page: {main!r}"
        )

    def css(self, selector: str, timeout: float = 10.0) -> Any:
        from selenium.webdriver.common.by import By

        return self.until(lambda: self.d.find_element(By.CSS_SELECTOR, selector), selector, timeout)

    def all(self, selector: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list(self.d.find_elements(By.CSS_SELECTOR, selector))

    def text(self, selector: str = "main") -> str:
        # Live updates redraw parts of the page: read again if the element was replaced.
        return str(self.until(lambda: self.css(selector).text or " ", f"text of {selector}"))

    def click(self, selector: str) -> None:
        """Click ``selector``, finding it again if a live redraw replaced it."""
        self.until(lambda: self.css(selector).click() or True, f"a click on {selector}")

    def attribute(self, selector: str, name: str) -> str | None:
        return self.until(lambda: [self.css(selector).get_attribute(name)], selector)[0]  # type: ignore[no-any-return]

    def wait_text(self, needle: str, selector: str = "main", timeout: float = 10.0) -> None:
        self.until(lambda: needle in self.text(selector), f"{needle!r} in {selector}", timeout)

    def confirm(self) -> None:
        self.css("dialog[open] button.danger").click()

    def shot(self, name: str) -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{name}.png"
        self.d.save_screenshot(str(path))
        return path

    def console_errors(self) -> list[str]:
        entries = self.d.get_log("browser")
        self.console += entries
        return [e["message"] for e in entries if e["level"] == "SEVERE"]

    def failure_report(self, name: str) -> str:
        """Leave a screenshot and a text report of the page as it is now (for a failed
        test): the URL, the page's text, its console and the tail of the served logs."""
        SHOTS.mkdir(parents=True, exist_ok=True)
        parts = [f"test: {name}", f"at: {time.strftime('%Y-%m-%dT%H:%M:%S%z')}"]
        try:
            self.d.save_screenshot(str(SHOTS / f"FAILED-{name}.png"))
            parts.append("url: " + self.d.current_url)
            parts.append("page:\n" + self.d.execute_script("return document.body.innerText"))
            # The page's last finished requests (one still in flight is not listed).
            parts.append("requests finished (ms since load):\n" + self.d.execute_script(_REQUESTS))
            self.console_errors()
        except Exception as exc:  # the browser itself may be what broke
            parts.append(f"browser unavailable: {exc!r}")
        parts.append(
            "console:\n"
            + "\n".join(f"  {e['timestamp']} {e['level']} {e['message']}" for e in self.console)
        )
        for log in self.served.logs:
            lines = log.read_text(errors="replace").splitlines() if log.exists() else []
            parts.append(f"{log.name} (last 150 lines):\n" + "\n".join(lines[-150:]))
        text = "\n\n".join(parts)
        (SHOTS / f"FAILED-{name}.txt").write_text(text)
        return text
