"""What a run needs from its engine: :class:`RunServices` and the hooks it carries.

The run imports neither the message handlers nor the children code: what it needs from
them reaches it through ``RunServices`` (``updates`` as :class:`UpdateHooks`,
``children`` as :class:`ChildHost`), filled in by ``Engine`` at open. Also here:
:class:`ContinueAsNew`, raised by ``ctx.continue_as_new`` to end one generation of a run
and start the next with new arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pyweft.clock import Clock
from pyweft.codec import PayloadCodec
from pyweft.definitions import ActivityDefinition, WorkflowDefinition
from pyweft.engine.replay.commit import Committer
from pyweft.engine.replay.events import EventBus
from pyweft.engine.replay.records import AppliedUpdate, UpdateResponse, WorkflowState
from pyweft.storage.base import Expect, Op, Storage

if TYPE_CHECKING:
    from pyweft.engine.composition.children import ClosePlan
    from pyweft.engine.replay.run import Run


class ChildHost(Protocol):
    """What the engine offers runs that start child workflows."""

    def child_definition(self, wf: Callable[..., Any] | str) -> WorkflowDefinition: ...

    async def child_create(
        self,
        parent: Run,
        definition: WorkflowDefinition,
        args: tuple[Any, ...],
        child_id: str,
        policy: str,
        deadline: float | None = None,
    ) -> tuple[list[Op], list[Expect], Callable[[], None]]: ...

    async def wait_terminal(self, workflow_id: str) -> WorkflowState: ...

    async def cancel_child(self, workflow_id: str) -> None: ...

    async def close_children(self, parent_id: str, asked: list[str] | None = None) -> None: ...

    async def close_plan(self, parent_id: str, now: float) -> ClosePlan: ...


class UpdateHooks(Protocol):
    """How a run applies update requests: the message layer hands these to the run, so
    the run does not import the update handlers."""

    async def process(self, run: Run) -> None: ...

    def reapply(self, run: Run, applied: AppliedUpdate) -> None: ...


class ContinueAsNew(BaseException):
    """Raised by ``ctx.continue_as_new``; the run restarts with these arguments."""

    def __init__(self, args: tuple[Any, ...]) -> None:
        super().__init__()
        self.args_ = args


@dataclass(slots=True)
class RunServices:
    """What a run needs from its engine (kept narrow so runs stay testable)."""

    storage: Storage
    committer: Committer
    clock: Clock
    codec: PayloadCodec
    executor: Executor
    activities: dict[str, ActivityDefinition]
    max_payload_bytes: int
    events: EventBus = field(default_factory=EventBus)
    poll_interval: float = 1.0
    on_update_response: Callable[[UpdateResponse], None] = lambda _: None
    children: ChildHost | None = None
    updates: UpdateHooks | None = None  # set by the engine; runs without it take no updates
    claims: Any = None  # ClaimRegistry under ownership="workflow-lease"
    max_history_steps: int = 100_000
    large_payload_bytes: int = 256 * 1024  # a step result past this is worth a warning
    on_idle: Callable[[Run], None] = lambda _: None  # every live step is a parked wait
    # What replay drift (NonDeterminismError, a version pin the code dropped) does:
    # "block" stores the run as blocked for fixed code; "fail_run" fails it.
    on_nondeterminism: str = "block"
    # Called when a step is about to run for real (past the recorded journal); the replay
    # checker (pyweft.testing.replay) stops the run there, so no new step runs.
    on_live: Callable[[Run], None] | None = None
    # Hands attempts on queues this engine does not serve to workers (engine/tasks);
    # None: every activity runs here.
    tasks: Any = None
    interceptors: Any = None  # pyweft.observability.chain.InterceptorChain, None if none
