"""When a schedule fires: cron expressions and fixed intervals, in a time zone.

Cron expressions are parsed and stepped by ``cronsim`` (see
docs/decisions/0021-cron-parser.md); this module adds the time zone and the
daylight-saving rules pyweft documents:

- A time inside a skipped local hour (spring forward) fires once, at the first
  valid instant after the gap (02:30 on a day 02:00-03:00 does not exist fires
  at 03:00).
- A time inside a repeated local hour (fall back) fires once, at its first
  occurrence, when the expression names the hour; an expression whose hour field
  is ``*`` fires in both copies of the hour (they are different instants).
- Intervals (``every``) are plain elapsed seconds from their anchor and ignore
  the time zone.

Every time here is epoch seconds (float); nominal times are whole seconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from pyweft.errors import InvalidScheduleError

MAX_EXPRESSION_CHARS = 200
MIN_INTERVAL_S = 1.0


def check_timezone(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidScheduleError(
            f"timezone must be an IANA zone name such as 'UTC' or 'Europe/Berlin', got {name!r}"
        )
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidScheduleError(
            f"unknown timezone {name!r}; use an IANA zone name such as 'UTC', "
            "'Europe/Berlin' or 'America/New_York'"
        ) from exc
    return name


def check_cron(expression: object) -> str:
    """A 5-field (minute first) or 6-field (seconds first) cron expression, or raise."""
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidScheduleError(f"cron must be a non-empty string, got {expression!r}")
    text = " ".join(expression.split())
    if len(text) > MAX_EXPRESSION_CHARS:
        raise InvalidScheduleError(f"cron expression is longer than {MAX_EXPRESSION_CHARS} chars")
    if len(text.split(" ")) not in (5, 6):
        raise InvalidScheduleError(
            f"cron {expression!r} has {len(text.split(' '))} fields; write 5 "
            "(minute hour day-of-month month day-of-week, e.g. '0 9 * * MON-FRI') or 6 "
            "(seconds first, e.g. '*/10 * * * * *')"
        )
    try:
        CronSim(text, datetime(2000, 1, 1, tzinfo=UTC))
    except (CronSimError, ValueError) as exc:
        raise InvalidScheduleError(f"cron {expression!r} is not valid: {exc}") from exc
    return text


@dataclass(frozen=True, slots=True)
class Cadence:
    """A schedule's recurrence: ``cron`` in ``timezone``, or ``every`` seconds from
    ``anchor`` (the first occurrence is ``anchor + every``)."""

    cron: str | None
    every: float | None
    timezone: str
    anchor: float

    def next_after(self, t: float) -> float | None:
        """The first occurrence strictly after ``t`` (``None``: the expression never fires)."""
        if self.every is not None:
            k = math.floor((t - self.anchor) / self.every) + 1
            return self.anchor + max(k, 1) * self.every
        assert self.cron is not None
        tz = ZoneInfo(self.timezone)
        start = datetime.fromtimestamp(math.floor(t), tz=tz)
        try:
            found = next(iter(CronSim(self.cron, start)))
        except StopIteration:
            return None
        return _instant(found)

    def occurrences(self, after: float, until: float, limit: int) -> Iterator[float]:
        """Occurrences in ``(after, until]``, oldest first, at most ``limit``."""
        if self.every is not None:
            t = self.next_after(after)
            n = 0
            while t is not None and t <= until and n < limit:
                yield t
                n += 1
                t += self.every
            return
        assert self.cron is not None
        tz = ZoneInfo(self.timezone)
        start = datetime.fromtimestamp(math.floor(after), tz=tz)
        n = 0
        for found in CronSim(self.cron, start):
            instant = _instant(found)
            if instant > until or n >= limit:
                return
            if instant > after:
                yield instant
                n += 1


def _instant(found: datetime) -> float:
    """Epoch seconds of a cronsim result (an aware local time; fold picks the copy)."""
    return found.astimezone(UTC).timestamp()


def interval_seconds(every: float) -> float:
    if not math.isfinite(every) or every < MIN_INTERVAL_S:
        raise InvalidScheduleError(
            f"every must be at least {MIN_INTERVAL_S:g} second, got {every!r}"
        )
    return float(every)


def as_utc(t: float) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=t)
