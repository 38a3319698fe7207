"""An engine's stable identity, and when an earlier incarnation of it is provably gone."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace

import pytest

from pyweft import ConfigurationError, Engine, MemoryStorage, workflow
from pyweft.engine.ownership.identity import (
    Incarnation,
    current,
    default_engine_id,
    process_start,
    provably_gone,
)


@workflow
async def alpha(ctx: object) -> None: ...


@workflow
async def beta(ctx: object) -> None: ...


@pytest.fixture
def live_child() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped: the pid names nobody now
    return proc.pid


def me() -> Incarnation:
    return current("app-1", "host:1:me")


def earlier(pid: int, **changes: object) -> Incarnation:
    base = replace(me(), instance_id="host:old:before", pid=pid, started=process_start(pid))
    return replace(base, **changes)  # type: ignore[arg-type]


def test_the_default_engine_id_is_the_same_for_the_same_app_on_the_same_store() -> None:
    one = Engine("memory://", workflows=[alpha, beta])
    again = Engine("memory://", workflows=[beta, alpha])
    other_app = Engine("memory://", workflows=[alpha])
    label = "pyweft.storage.memory.MemoryStorage"
    assert one.engine_id == default_engine_id(label, ["alpha", "beta"])
    assert one.engine_id == again.engine_id  # registration order does not matter
    assert one.engine_id != other_app.engine_id
    assert Engine(MemoryStorage(), engine_id="billing-7").engine_id == "billing-7"


@pytest.mark.parametrize("bad", ["", "   ", "x" * 201, 7])
def test_an_unusable_engine_id_is_a_configuration_error(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="engine_id"):
        Engine(MemoryStorage(), engine_id=bad)  # type: ignore[arg-type]


def test_a_dead_earlier_incarnation_on_this_host_is_provably_gone() -> None:
    assert provably_gone(earlier(dead_pid(), started=None), me())


def test_a_live_process_with_the_same_engine_id_is_never_taken_for_gone(
    live_child: subprocess.Popen[bytes],
) -> None:
    assert not provably_gone(earlier(live_child.pid), me())
    # Even without a start time to compare, a live pid is given the benefit of the doubt.
    assert not provably_gone(earlier(live_child.pid, started=None), me())


def test_a_reused_pid_is_recognised_by_its_start_time(
    live_child: subprocess.Popen[bytes],
) -> None:
    if process_start(live_child.pid) is None:
        pytest.skip("this platform exposes no process start time (/proc/<pid>/stat)")
    assert provably_gone(earlier(live_child.pid, started="1"), me())


def test_another_engine_id_another_host_or_this_very_process_are_not_gone() -> None:
    gone = dead_pid()
    assert not provably_gone(earlier(gone, engine_id="another-app"), me())
    assert not provably_gone(earlier(gone, host="elsewhere"), me())
    # Another engine in this same process (same pid, same start time) is alive.
    assert not provably_gone(earlier(os.getpid()), me())
    assert not provably_gone(None, me())


def test_a_reboot_since_the_record_was_written_makes_it_gone(
    live_child: subprocess.Popen[bytes],
) -> None:
    if me().boot is None:
        pytest.skip("this platform exposes no boot id")
    assert provably_gone(earlier(live_child.pid, boot="another-boot"), me())
