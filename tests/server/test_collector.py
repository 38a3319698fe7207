"""`pyweft serve` raises the collector's young-generation threshold while it serves."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from pyweft import Engine, WorkflowContext, workflow
from pyweft.server import serve as serve_module
from pyweft.server.collector import SERVER_GEN0_THRESHOLD, server_gc_threshold


@workflow
async def idle(ctx: WorkflowContext) -> None:
    return None


@pytest.fixture
def default_collector() -> Iterator[tuple[int, int, int]]:
    before, enabled = gc.get_threshold(), gc.isenabled()
    gc.set_threshold(700, 10, 10)
    gc.enable()
    try:
        yield gc.get_threshold()
    finally:
        gc.set_threshold(*before)
        if not enabled:
            gc.disable()


def test_threshold_is_raised_inside_and_restored_after(
    default_collector: tuple[int, int, int],
) -> None:
    with server_gc_threshold():
        assert gc.get_threshold() == (SERVER_GEN0_THRESHOLD, 10, 10)
    assert gc.get_threshold() == default_collector


def test_threshold_is_restored_when_the_block_raises(
    default_collector: tuple[int, int, int],
) -> None:
    with pytest.raises(RuntimeError), server_gc_threshold():
        raise RuntimeError("boom")
    assert gc.get_threshold() == default_collector


def test_a_higher_threshold_set_by_the_process_is_kept(
    default_collector: tuple[int, int, int],
) -> None:
    gc.set_threshold(50_000, 20, 30)
    with server_gc_threshold():
        assert gc.get_threshold() == (50_000, 20, 30)
    assert gc.get_threshold() == (50_000, 20, 30)


def test_a_disabled_collector_is_left_off(default_collector: tuple[int, int, int]) -> None:
    gc.disable()
    with server_gc_threshold():
        assert not gc.isenabled()
        assert gc.get_threshold() == default_collector
    assert not gc.isenabled()


def test_a_zero_threshold_keeps_automatic_collection_off(
    default_collector: tuple[int, int, int],
) -> None:
    gc.set_threshold(0)
    with server_gc_threshold():
        assert gc.get_threshold()[0] == 0
    assert gc.get_threshold()[0] == 0


def test_a_threshold_changed_while_serving_is_not_undone(
    default_collector: tuple[int, int, int],
) -> None:
    with server_gc_threshold():
        gc.set_threshold(2_000, 10, 10)
    assert gc.get_threshold() == (2_000, 10, 10)


async def test_serve_runs_the_server_under_the_raised_threshold(
    default_collector: tuple[int, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[int, int, int]] = []

    async def fake_serve(self: object) -> None:  # stands in for uvicorn's socket loop
        seen.append(gc.get_threshold())

    monkeypatch.setattr(serve_module._Server, "serve", fake_serve)
    await serve_module.serve(Engine("memory://", workflows=[idle]), dashboard=False)
    assert seen == [(SERVER_GEN0_THRESHOLD, 10, 10)]
    assert gc.get_threshold() == default_collector
