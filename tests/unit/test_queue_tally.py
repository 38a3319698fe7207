"""The dispatcher's slot tally never counts fewer slots than the store holds (issue 14)."""

from __future__ import annotations

from pyweft.engine.queues import layout
from pyweft.engine.queues.tally import SlotTally

ME, OTHER = b"engine-a", b"engine-b"


def slots(**owners: bytes) -> list[tuple[str, bytes]]:
    return [(layout.slot("q", "", run_id), owner) for run_id, owner in sorted(owners.items())]


def test_an_end_the_read_already_left_out_is_not_taken_off_again() -> None:
    # x ended: its slot is gone from the read, but its engine hears of the end later.
    tally = SlotTally.read(None, slots(y=ME, z=OTHER), ME, going={"x", "y"})
    assert (tally.held, tally.mine, tally.counted) == (2, 1, {"y"})
    tally.ended("x")
    assert (tally.held, tally.mine) == (2, 1)
    tally.ended("y")
    assert (tally.held, tally.mine) == (1, 0)
    tally.ended("y")  # heard of once only, but never taken off twice either
    assert (tally.held, tally.mine) == (1, 0)


def test_runs_dispatched_since_the_read_come_off_when_they_end() -> None:
    tally = SlotTally.read(b"\x01", slots(z=OTHER), ME, going=set())
    tally.took(["p", "q"], b"\x02")
    assert (tally.counter, tally.held, tally.mine) == (b"\x02", 3, 2)
    tally.ended("p")
    assert (tally.held, tally.mine, tally.counted) == (2, 1, {"q"})


def test_a_slot_of_ours_whose_end_was_heard_during_the_read_stays_counted() -> None:
    # w's end was heard of while the read was under way (it is no longer going), yet
    # the read returned its slot: it stays counted until the next read, too high only.
    tally = SlotTally.read(None, slots(w=ME), ME, going=set())
    assert (tally.held, tally.mine, tally.counted) == (1, 1, set())
