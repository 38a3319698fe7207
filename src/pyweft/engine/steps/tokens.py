"""Execution tokens: strings a user's own database can fence stale writers with.

Both are built from fixed-width fields, so plain string order (Python ``<``,
SQL ``<`` on a text column) is their order in time:

- ``workflow_execution_token`` = ``{run}:{generation}:{owner epoch}``. The owner
  epoch is the fencing epoch of the engine driving the run (the store lease's
  under ``ownership="lease"``, the run's claim under ``"workflow-lease"``), so it
  grows when another engine takes the run over. A forked run has its own id, so
  its own token; ``continue_as_new`` bumps the generation.
- ``attempt_token`` = ``{execution token}:{step}:{attempt}`` (built by the
  activity context): unique per attempt, growing with each attempt of one step,
  across takeovers too.

With ``ownership="none"`` there is no epoch (0): one engine drives the store, and
an attempt cut short by a crash is run again under the same token, by design
(the crashed process cannot write any more).
"""

from __future__ import annotations

from pyweft.engine.replay import keys
from pyweft.engine.replay.run import Run


def owner_epoch(run: Run) -> int:
    """The fencing epoch this engine holds for ``run`` (0 when the mode has none)."""
    fence = run.services.committer.fence
    if fence is None:
        return 0
    try:
        conditions = fence.conditions(run.id)
    except Exception:  # not ours any more: the attempt is about to be refused anyway
        return 0
    for cond in conditions:
        if cond.value is not None and len(cond.value) == 8:
            return int.from_bytes(cond.value, "big")
    return 0


def execution_token(run: Run, epoch: int) -> str:
    """The token of ``run`` driven under ``epoch`` (read with :func:`owner_epoch` when the
    step started; the string itself is built only when the activity asks for it)."""
    return f"{keys.enc(run.id)}:{run.state.generation:08d}:{epoch:016d}"
