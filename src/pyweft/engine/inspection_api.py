"""The engine's inspection and housekeeping surface: describe, list, aggregate,
history, search attributes, fork, purge and retention. ``Engine`` inherits it; the
work happens in ``visibility`` and ``control.maintenance``."""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pyweft.engine import bulk
from pyweft.engine.bulk import BulkPreview, BulkResult
from pyweft.engine.control import maintenance
from pyweft.engine.handle import WorkflowHandle
from pyweft.engine.replay.info import Page, WorkflowInfo
from pyweft.engine.schemas import WorkflowSchema, workflow_schema
from pyweft.engine.visibility import query
from pyweft.engine.visibility.reader import Group, History
from pyweft.errors import InvalidArgumentError

if TYPE_CHECKING:
    from pyweft.engine.control.core import EngineCore
    from pyweft.engine.engine import Engine

_FILTER_NAMES = {
    "status",
    "failure_category",
    "workflow_type",
    "id_prefix",
    "parent_id",
    "created_after",
    "created_before",
    "updated_after",
    "updated_before",
    "attributes",
    "tags",
    "schedule_id",
}


class InspectionAPI:
    """What is stored about runs, and its upkeep (mixed into :class:`~pyweft.Engine`)."""

    _core: EngineCore
    _sweeper: maintenance.RetentionSweeper

    def _as_engine(self) -> Engine:
        return self  # type: ignore[return-value]  # only ever mixed into Engine

    async def describe(self, workflow_id: str) -> WorkflowInfo:
        """The stored state of a run. Raises ``WorkflowNotFoundError`` for an unknown id."""
        self._core.services_or_raise()
        return await self._core.visibility.describe(workflow_id)

    async def list(
        self,
        *,
        status: str | Sequence[str] | None = None,
        workflow_type: str | None = None,
        id_prefix: str | None = None,
        parent_id: str | None = None,
        created_after: datetime | float | None = None,
        created_before: datetime | float | None = None,
        updated_after: datetime | float | None = None,
        updated_before: datetime | float | None = None,
        attributes: Mapping[str, Any] | None = None,
        tags: Sequence[str] | None = None,
        schedule_id: str | None = None,
        failure_category: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[WorkflowInfo]:
        """Runs matching every filter given, newest first; pass ``next_cursor`` to page.

        ``status`` may be one status or several. ``attributes`` maps a search
        attribute to a value (equality) or to a dict of ``gt``/``gte``/``lt``/
        ``lte`` bounds. ``failure_category`` keeps runs that failed for that reason
        (``"timeout"``...). Filters are served from indexes; an invalid filter
        raises :class:`InvalidArgumentError` before anything is read.
        """
        self._core.services_or_raise()
        flt = query.build_filter(
            status=status,
            workflow_type=workflow_type,
            id_prefix=id_prefix,
            parent_id=parent_id,
            created_after=created_after,
            created_before=created_before,
            updated_after=updated_after,
            updated_before=updated_before,
            attributes=attributes,
            tags=tags,
            schedule_id=schedule_id,
            failure_category=failure_category,
        )
        return await self._core.visibility.list(flt, limit=limit, cursor=cursor)

    async def aggregate(self, *, group_by: str, **filters: Any) -> builtins.list[Group]:
        """Counts of runs per ``"status"``, ``"type"``, ``"failure_category"`` or search
        attribute, over the same filters as :meth:`list` (without paging). Largest groups
        first."""
        self._core.services_or_raise()
        _check_filter_names(filters)
        flt = query.build_filter(**filters)
        return await self._core.visibility.aggregate(group_by, flt)

    def workflow_schemas(self) -> builtins.list[WorkflowSchema]:
        """Every registered workflow type with the JSON Schemas of its arguments and
        result, derived from its type hints (``{}`` where a hint has no schema)."""
        return [workflow_schema(d) for _, d in sorted(self._core.workflows.items())]

    async def history(self, workflow_id: str) -> History:
        """A run's steps (committed and open) and its events, in order."""
        self._core.services_or_raise()
        return await self._core.visibility.history(workflow_id)

    @staticmethod
    def check_attributes(values: Mapping[str, Any]) -> None:
        """Raise :class:`InvalidArgumentError` if :meth:`set_attributes` would refuse
        ``values``; reads and writes nothing (for edges that validate before acting)."""
        from pyweft.engine.steps import attributes

        attributes.normalize(values)

    async def set_attributes(self, workflow_id: str, values: Mapping[str, Any]) -> None:
        """Set search attributes of a run from outside (``None`` removes one)."""
        await maintenance.set_attributes(self._core, workflow_id, values)

    async def fork(
        self,
        workflow_id: str,
        *,
        from_step: int | None = None,
        id: str | None = None,
        drive: bool = True,
    ) -> WorkflowHandle[Any]:
        """Start a new run that reuses ``workflow_id``'s journal up to ``from_step``
        (default: every committed step, clamped to the last one) and records where it
        came from. ``drive=False`` only stores it, for an engine that registers the
        workflow type to pick up (a running one does, within its poll interval)."""
        new_id = await maintenance.fork(self._core, workflow_id, from_step, id, drive=drive)
        return WorkflowHandle(self._as_engine(), new_id)

    async def purge(self, **filters: Any) -> int:
        """Permanently delete finished runs matching the filters; returns how many.

        Running runs are never touched. Idempotency keys of purged runs stay
        spent.
        """
        self._core.services_or_raise()
        _check_filter_names(filters)
        return await maintenance.purge(self._core, query.build_filter(**filters))

    async def bulk_preview(
        self, operation: str, *, signal: tuple[str, Any] | None = None, **filters: Any
    ) -> BulkPreview:
        """The dry run of a bulk operation (``"cancel"``, ``"signal"`` with
        ``signal=(name, payload)``, ``"retry_failed"`` which forks each failed run, or
        ``"delete"`` of finished runs) over the runs matching ``filters`` (those of
        :meth:`list`, which must include a scope: status, type, tags, attributes or an
        id prefix of 3+ characters). Returns the count, a sample, and the token
        :meth:`bulk_commit` needs; nothing is changed."""
        self._core.services_or_raise()
        _check_filter_names(filters)
        return await bulk.preview(self._as_engine(), operation, filters, signal)

    async def bulk_commit(
        self,
        operation: str,
        *,
        confirmation_token: str,
        signal: tuple[str, Any] | None = None,
        actor: str | None = None,
        **filters: Any,
    ) -> BulkResult:
        """Apply a previewed bulk operation: the same ``operation``, ``signal`` and
        ``filters`` as the dry run, with its token (single-use, valid 10 minutes;
        :class:`BulkOperationConfirmationError` otherwise). Acts on the runs matching
        now, skips runs that ended meanwhile, and writes an audit record naming
        ``actor``. After a ``StorageError``, or with ``failed`` runs in the result,
        commit again with the same token: that finishes it, acting on no run twice."""
        self._core.services_or_raise()
        _check_filter_names(filters)
        return await bulk.commit(
            self._as_engine(),
            operation,
            filters,
            confirmation_token=confirmation_token,
            signal=signal,
            actor=actor,
        )

    async def bulk_audit(self, *, limit: int = 50) -> builtins.list[dict[str, Any]]:
        """The newest bulk operations committed on this store, newest first."""
        self._core.services_or_raise()
        if type(limit) is not int or not 1 <= limit <= 1000:
            raise InvalidArgumentError(f"limit must be an int in [1, 1000], got {limit!r}")
        return await bulk.audit_log(self._as_engine(), limit)

    async def sweep_retention(self) -> int:
        """Run one retention pass now (the engine also runs them on its interval)."""
        self._core.services_or_raise()
        return await self._sweeper.sweep()


def _check_filter_names(filters: Mapping[str, Any]) -> None:
    unknown = set(filters) - _FILTER_NAMES
    if unknown:
        raise InvalidArgumentError(
            f"unknown filter(s) {', '.join(sorted(unknown))}; "
            f"use {', '.join(sorted(_FILTER_NAMES))}"
        )
