"""The fan-out path of the fleet SSE feed: unfiltered feeds share one encoded span per
wake-up, and keep the feed's semantics (cursors, gap notice, pings, no loss or repeat)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from pyweft import Engine, WorkflowEvent
from pyweft.server.feeds import EventJournal, FeedFilter
from pyweft.server.routes_streams import _sse


def _event(i: int) -> WorkflowEvent:
    return WorkflowEvent(
        kind="started", workflow_id=f"w{i}", workflow_type="t", at=datetime.now(UTC)
    )


async def _read_until_ping(journal: EventJournal, cursor: str) -> list[bytes]:
    chunks = []
    async for chunk in journal.follow_sse(FeedFilter(), cursor, ping_s=0.01, encode=_sse):
        chunks.append(chunk)
        if chunk == b": ping\n\n":
            break
    return chunks


async def test_unfiltered_feeds_resume_exactly_and_share_one_encoded_span(engine: Engine) -> None:
    journal = EventJournal(engine, capacity=100)
    for i in range(5):
        journal.append(_event(i))
    first = await _read_until_ping(journal, journal.cursor(2))
    second = await _read_until_ping(journal, journal.cursor(2))
    assert first[0] is second[0]  # the same bytes object: encoded once, sent twice
    ids = re.findall(rb"id: (\S+)", first[0])
    assert ids == [journal.cursor(n).encode() for n in (3, 4, 5)]
    assert first[0].count(b"event: event\n") == 3
    assert b'"workflow_id":"w2"' in first[0] and b'"workflow_id":"w1"' not in first[0]
    assert await _read_until_ping(journal, journal.now()) == [b": ping\n\n"]


async def test_unfiltered_feed_from_before_the_journal_gets_a_gap_first(engine: Engine) -> None:
    journal = EventJournal(engine, capacity=3)
    for i in range(5):
        journal.append(_event(i))
    chunks = await _read_until_ping(journal, journal.cursor(1))
    assert chunks[0].startswith(b"event: gap\n")
    assert re.findall(rb"id: \S+-(\d+)", chunks[1]) == [b"3", b"4", b"5"]
