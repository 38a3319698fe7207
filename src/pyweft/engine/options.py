"""Checking ``Engine(...)``'s options and opening its store, before anything starts.

Every refusal is a :class:`ConfigurationError` naming the option, what was given and
what to write instead; nothing is opened or written when one is raised.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pyweft.definitions import Duration, parse_retention
from pyweft.engine.ownership import MODES
from pyweft.errors import ConfigurationError, DefinitionError
from pyweft.storage.base import Storage
from pyweft.storage.factory import open_storage
from pyweft.storage.sqlite import SQLiteStorage


def check(
    *,
    workflows: Iterable[Any],
    activities: Iterable[Any],
    max_payload_bytes: Any,
    max_history_steps: Any,
    activity_threads: Any,
    poll_interval: Any,
    max_cached_runs: Any,
    version_mismatch: Any,
    on_nondeterminism: Any,
    ownership: Any,
    role: Any,
    engine_id: Any,
    detect_second_instance: bool,
    retention_batch_size: Any,
) -> None:
    """Refuse option values the engine cannot run with."""
    for option, given in (("workflows", workflows), ("activities", activities)):
        if callable(given) or isinstance(given, str):
            raise ConfigurationError(
                f"{option} must be a list of functions, got {named(given)} itself; "
                f"write {option}=[{getattr(given, '__name__', '...')}]"
            )
    if type(max_payload_bytes) is not int or max_payload_bytes < 1:
        raise ConfigurationError(
            f"max_payload_bytes must be a positive int, got {max_payload_bytes!r}"
        )
    if type(max_history_steps) is not int or max_history_steps < 1:
        raise ConfigurationError(
            f"max_history_steps must be a positive int, got {max_history_steps!r}"
        )
    if type(activity_threads) is not int or activity_threads < 1:
        raise ConfigurationError(
            f"activity_threads must be a positive int, got {activity_threads!r}"
        )
    if not isinstance(poll_interval, int | float) or not 0 < poll_interval <= 60:
        raise ConfigurationError(
            f"poll_interval must be a number of seconds in (0, 60], got {poll_interval!r}"
        )
    if type(max_cached_runs) is not int or max_cached_runs < 0:
        raise ConfigurationError(
            f"max_cached_runs must be an int >= 0 (how many runs stay in memory), "
            f"got {max_cached_runs!r}"
        )
    if version_mismatch not in ("block", "fail_run", "raise"):
        raise ConfigurationError(
            f"version_mismatch must be 'block', 'fail_run' or 'raise', got {version_mismatch!r}"
        )
    if on_nondeterminism not in ("block", "fail_run"):
        raise ConfigurationError(
            f"on_nondeterminism must be 'block' or 'fail_run', got {on_nondeterminism!r}"
        )
    if ownership is not None and ownership not in MODES:
        raise ConfigurationError(
            f"ownership must be one of {', '.join(MODES)} (or None for the store's "
            f"default), got {ownership!r}"
        )
    if role not in ("engine", "client"):
        raise ConfigurationError(f"role must be 'engine' or 'client', got {role!r}")
    if engine_id is not None and (
        not isinstance(engine_id, str) or not engine_id.strip() or len(engine_id) > 200
    ):
        raise ConfigurationError(
            f"engine_id must be a non-empty string of at most 200 characters, got "
            f"{engine_id!r}; leave it out for the default (host + store + workflow types)"
        )
    if role == "client" and detect_second_instance:
        raise ConfigurationError(
            "detect_second_instance does not apply to role='client': a client drives "
            "no runs, so it cannot be a second instance"
        )
    if type(retention_batch_size) is not int or retention_batch_size < 1:
        raise ConfigurationError("retention_batch_size must be a positive int")


def retention_rules(retention: Mapping[str, Duration] | None) -> dict[str, float]:
    """``retention=`` as seconds per terminal status."""
    try:
        return parse_retention(retention) if retention is not None else {}
    except DefinitionError as exc:
        raise ConfigurationError(str(exc)) from exc


def open_store(storage: Any, sqlite_synchronous: str | None) -> tuple[Storage, bool]:
    """The engine's store, and whether the engine opened it (and so closes it)."""
    if isinstance(storage, str) or storage is None:
        store: Storage = open_storage(storage, sqlite_synchronous=sqlite_synchronous or "FULL")
        owns = True
        if sqlite_synchronous is not None and not isinstance(store, SQLiteStorage):
            # Adapters open lazily, so dropping this one leaves nothing behind.
            raise ConfigurationError(
                f"sqlite_synchronous={sqlite_synchronous!r} applies only to SQLite stores, "
                f"and this engine's store is {type(store).__name__}; drop the option "
                "(it would change nothing)"
            )
    elif isinstance(storage, Storage):
        store = storage
        owns = False
        if sqlite_synchronous is not None:
            raise ConfigurationError(
                f"sqlite_synchronous={sqlite_synchronous!r} is for a store the engine opens "
                f"from a URL; this engine was given a ready {type(storage).__name__}, so "
                "set synchronous= on that adapter (or pass its URL) instead"
            )
    else:
        raise ConfigurationError(
            f"storage must be a URL string, a Storage instance or None, got {storage!r}"
        )
    return store, owns


def named(fn: object) -> str:
    return str(getattr(fn, "__qualname__", None) or repr(fn))


def serve_queues(given: Any) -> frozenset[str] | None:
    """``serve_queues``: ``None`` (every queue runs here) or the queues this engine runs."""
    if given is None:
        return None
    if isinstance(given, str) or not isinstance(given, Iterable):
        raise ConfigurationError(
            f"serve_queues must be a list of queue names (or None to run every activity "
            f"here, [] to run none), got {given!r}; write serve_queues=[{given!r}]"
        )
    from pyweft.engine.tasks.records import check_queue
    from pyweft.errors import InvalidArgumentError

    names: set[str] = set()
    for name in given:
        try:
            names.add(check_queue(name, field="each of serve_queues"))
        except InvalidArgumentError as exc:
            raise ConfigurationError(str(exc)) from None
    return frozenset(names)
