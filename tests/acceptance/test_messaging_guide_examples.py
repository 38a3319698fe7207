"""The signal-handler, workflow-to-workflow and finished-query examples of the messaging
guides run as written and print what the guides say they print."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.guides import block


def _run(code: str, tmp_path: Path) -> str:
    script = tmp_path / "example.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_signal_handler_example_applies_orders_in_arrival_order(tmp_path: Path) -> None:
    out = _run(block("signals", 2), tmp_path)
    assert out.strip() == "{'table': 7, 'orders': ['tea', 'cake'], 'paid': True}"


def test_the_workflow_messages_example_signals_the_parent_and_cancels(tmp_path: Path) -> None:
    out = _run(block("signals", 3), tmp_path)
    assert out.split() == ["['o-1',", "'o-2']", "cancelled"]


def test_the_finished_query_example_replays_without_running_activities(tmp_path: Path) -> None:
    out = _run(block("queries-and-updates", 2), tmp_path)
    assert out.splitlines() == [
        "weighing mug",
        "weighing teapot",
        "900",
        "{'mug': 300, 'teapot': 600}",
    ]


def test_the_handlers_example_lists_what_the_run_takes(tmp_path: Path) -> None:
    out = _run(block("queries-and-updates", 5), tmp_path)
    assert out.splitlines() == [
        "[('add', False), ('checkout', True)]",
        "{'type': 'string'} Take every item of a SKU out.",
        "0",
    ]
