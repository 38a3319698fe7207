"""pyweft.sync twins of published events, streams, update-with-start and debounce."""

from __future__ import annotations

from pathlib import Path

import pyweft.sync
from pyweft import WorkflowContext, workflow


@workflow
async def narrator(ctx: WorkflowContext, words: list[str]) -> int:
    counter = {"n": 0}

    def bump(by: int) -> int:
        counter["n"] += by
        return counter["n"]

    ctx.on_update("bump", bump)
    out = ctx.stream("words")
    for word in words:
        await out.write(word)
    await out.write(None)
    await ctx.set_event("told", len(words))
    await ctx.wait_for_signal("end")
    return counter["n"]


def test_blocking_engine_reads_events_and_streams_and_updates_with_start(
    tmp_path: Path,
) -> None:
    with pyweft.sync.Engine(f"sqlite:///{tmp_path / 'db'}", workflows=[narrator]) as engine:
        handle, answer = engine.update_with_start(narrator, ["a", "b"], update=("bump", 2), id="n")
        assert answer == 2
        assert engine.get_event("n", "told", timeout=5) == 2
        with engine.read_stream("n", "words") as chunks:
            got = [next(chunks) for _ in range(3)]
        assert got == ["a", "b", None]
        handle.signal("end")
        assert handle.result(timeout=5) == 2
        assert list(engine.read_stream("n", "words", from_offset=1)) == ["b", None]
        debounced = engine.debounce("k", narrator, [], period=3600)
        assert debounced.describe().status == "pending"
