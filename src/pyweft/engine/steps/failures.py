"""How an activity's failure is recorded, and how the workflow gets it back.

A failure is stored as its type name, message, traceback text and class path
(``module.QualName``). The workflow always gets an
:class:`~pyweft.errors.ActivityError` (its ``except ActivityError`` keeps working
across restarts); its ``cause`` is the original exception rebuilt when that is
safe: the class's module is already imported in this process (nothing is imported
because a stored record says so), the class is an ``Exception`` and it can be
built from the message alone. Otherwise ``cause`` is ``None`` and the type name,
message and traceback text are there to branch on.
"""

from __future__ import annotations

import sys
import traceback

from pyweft.engine.replay.records import ErrorInfo, StepRecord
from pyweft.errors import ActivityError, ApplicationError

MAX_TRACEBACK_CHARS = 16_000


def failure_info(exc: BaseException) -> ErrorInfo:
    """``exc`` as recorded for an activity: type, message, code, traceback, class path."""
    cls = type(exc)
    name = cls.__name__
    if isinstance(exc, ApplicationError) and exc.type:
        name = exc.type
    code = getattr(exc, "code", None)
    text = "".join(traceback.format_exception(exc))
    if len(text) > MAX_TRACEBACK_CHARS:  # keep the end: the frame that raised
        text = "...\n" + text[-MAX_TRACEBACK_CHARS:]
    return ErrorInfo(
        type=name,
        message=str(exc),
        code=code if isinstance(code, str) else None,
        traceback=text,
        module=f"{cls.__module__}.{cls.__qualname__}",
    )


def rebuild(info: ErrorInfo) -> BaseException | None:
    """The original exception, rebuilt from ``info`` when that is safe (see module doc)."""
    path = info.module
    if not path or "<" in path:  # a class defined inside a function cannot be found
        return None
    cls: object = None
    # The longest imported module prefix holds the class (``a.b.Outer.Inner``).
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is not None:
            cls = module
            for attr in parts[cut:]:
                cls = getattr(cls, attr, None)
            break
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        return None
    try:
        if cls is ApplicationError:
            return ApplicationError(info.message, type=info.type)
        return cls(info.message)
    except Exception:
        return None


def activity_error(rec: StepRecord) -> ActivityError:
    err = rec.error or ErrorInfo(type="Exception", message="")
    cause = rebuild(err)
    error = ActivityError(
        f"activity {rec.name!r} (step {rec.step}) failed after {rec.attempts} attempt(s): "
        f"{err.type}: {err.message}",
        activity_name=rec.name,
        step=rec.step,
        attempts=rec.attempts,
        error_type=err.type,
        error_message=err.message,
        error_traceback=err.traceback,
        cause=cause,
    )
    error.__cause__ = cause
    return error
