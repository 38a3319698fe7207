"""The engine every CLI command opens: it reads and writes the store, and drives nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pyweft import Engine, PayloadCodec
from pyweft.cli import cli_codec


def open_engine(
    db: str | None,
    *,
    workflows: Iterable[Callable[..., Any]] = (),
    codec: PayloadCodec | None = None,
) -> Engine:
    """An engine on ``db`` for one short-lived command; use it as ``async with``."""
    # recover=False: this process must never resume (drive) anybody's runs, and its
    # wake-up poller must not adopt runs that other processes leave for an engine.
    return Engine(db, recover=False, workflows=workflows, codec=codec or cli_codec())


__all__ = ["open_engine"]
