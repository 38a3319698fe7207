"""What a dispatcher knows of a partition's slots between two reads of them.

While one engine is the one dispatching a partition (no rate limit), it need not read
the counter and the slots at every pass: it keeps the counter it last wrote and the
slots it last counted. A competing dispatcher rewrites the counter, which fails our
next batch (and we read again), so the only changes the tally must follow itself are
its own: runs it dispatches (added) and runs of its own that end (taken off).

The tally must never be lower than the truth, or the queue runs over its limit. A
run's end is stored, deleting its slot, *before* its engine hears of it, so a read
made in between already leaves that slot out; taking the run off again when its end
is heard of would count a slot free that is not (issue 14: a sixth run on a queue of
five). So the tally takes off only the runs it counted itself: those whose slot the
read returned while their end was still unheard of, and those it added since.
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass, field

from pyweft.engine.queues import layout


@dataclass(slots=True)
class SlotTally:
    """Slots held in one partition, never fewer than the store holds (see module doc)."""

    counter: bytes | None
    """The dispatch counter as this engine last read or wrote it."""
    held: int
    """Slots held, by every engine."""
    mine: int
    """Of which this engine's (its ``worker_concurrency``)."""
    counted: set[str] = field(default_factory=set)
    """This engine's runs counted in ``held`` whose end it has not heard of yet."""

    @classmethod
    def read(
        cls,
        counter: bytes | None,
        slots: Iterable[tuple[str, bytes]],
        me: bytes,
        going: Set[str],
    ) -> SlotTally:
        """The tally of a fresh read: ``slots`` as scanned (read after ``counter``), and
        ``going``, the runs this engine dispatched whose end it has not heard of yet.

        A run of ours whose end was heard of while the read was under way is not in
        ``going``: if the read still returned its slot, that slot stays counted until
        the next read (too high, never too low)."""
        held, ours = 0, set()
        for key, engine in slots:
            held += 1
            if engine == me:
                ours.add(layout.last_part(key))
        return cls(counter=counter, held=held, mine=len(ours), counted=ours & going)

    def took(self, run_ids: Iterable[str], counter: bytes) -> None:
        """This engine's batch that wrote ``counter`` dispatched ``run_ids``."""
        for run_id in run_ids:
            self.counted.add(run_id)
            self.held += 1
            self.mine += 1
        self.counter = counter

    def ended(self, run_id: str) -> None:
        """This engine heard that its run ``run_id`` ended (its slot is deleted)."""
        if run_id in self.counted:  # else the read that made the tally left it out already
            self.counted.remove(run_id)
            self.held -= 1
            self.mine -= 1
