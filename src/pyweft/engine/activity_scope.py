"""Old import path of ``activity_log`` and ``ActivityLogFilter``, kept because the docs
and the changelog name it; the module lives in ``pyweft.engine.steps.activity_scope``."""

from pyweft.engine.steps.activity_scope import ActivityLogFilter, activity_log

__all__ = ["ActivityLogFilter", "activity_log"]
