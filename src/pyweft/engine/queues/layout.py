"""The keys a workflow queue keeps in the store.

Per queue and partition (``""`` when the queue is not partitioned), under
``wfq:q:{queue}:p{partition}:``:

``w:{priority10}:{enqueued16}:{id}``  a waiting run (value: its not-before time, or empty)
``s:{id}``                            a slot: a run dispatched and not finished (value: the
                                      engine that dispatched it)
``t:{started16}:{id}``                a start, kept for one rate-limit window
``v``                                 the dispatch counter: every dispatch batch rewrites
                                      it, so two dispatchers never both fill the last slots

Beside them: ``wfq:def:{queue}`` the queue's stored definition, ``wfq:m:{queue}:{partition}``
a partition that may have waiting runs (value: a token rewritten by every enqueue),
``wfq:d:{queue}:{dedup id}`` the run holding a deduplication id.
"""

from __future__ import annotations

from pyweft.engine.replay.keys import dec, enc, ts16

DEF_PREFIX = "wfq:def:"


def definition(queue: str) -> str:
    return f"{DEF_PREFIX}{enc(queue)}"


def base(queue: str, partition: str) -> str:
    return f"wfq:q:{enc(queue)}:p{enc(partition)}:"


def waiting_prefix(queue: str, partition: str) -> str:
    return base(queue, partition) + "w:"


def waiting(queue: str, partition: str, priority: int, enqueued_at: float, run_id: str) -> str:
    return f"{waiting_prefix(queue, partition)}{priority:010d}:{ts16(enqueued_at)}:{enc(run_id)}"


def slot_prefix(queue: str, partition: str) -> str:
    return base(queue, partition) + "s:"


def slot(queue: str, partition: str, run_id: str) -> str:
    return f"{slot_prefix(queue, partition)}{enc(run_id)}"


def starts_prefix(queue: str, partition: str) -> str:
    return base(queue, partition) + "t:"


def start(queue: str, partition: str, started_at: float, run_id: str) -> str:
    return f"{starts_prefix(queue, partition)}{ts16(started_at)}:{enc(run_id)}"


def counter(queue: str, partition: str) -> str:
    return base(queue, partition) + "v"


def marker_prefix(queue: str) -> str:
    return f"wfq:m:{enc(queue)}:"


def marker(queue: str, partition: str) -> str:
    return f"{marker_prefix(queue)}{enc(partition)}"


def dedup(queue: str, deduplication_id: str) -> str:
    return f"wfq:d:{enc(queue)}:{enc(deduplication_id)}"


def last_part(key: str) -> str:
    """The run id (or partition) a key ends with."""
    return dec(key.rsplit(":", 1)[1])


def time_part(key: str) -> float:
    """The time of a waiting entry or a start key (the field before the run id)."""
    return int(key.rsplit(":", 2)[1]) / 1_000_000
