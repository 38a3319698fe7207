from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print each soak's fault count where CI shows it, with or without ``-s``."""
    from support.faultsoak import SUMMARY

    for line in SUMMARY:
        terminalreporter.write_line(line)
