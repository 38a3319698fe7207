"""Durations, parsed in one place.

Every option that takes a length of time (``ctx.sleep``, timeouts, retry
intervals, lease periods...) accepts the same forms, so users learn them
once: seconds as a number, a ``datetime.timedelta``, or a human string such
as ``"90s"``, ``"1h30m"`` or ``"2 days"``. Everything becomes float seconds.

The numeric case sits on the engine's hot path, so it is checked first with
an exact ``type()`` test before anything slower runs.

Points in time (``ctx.sleep_until``, ``start_at``) are parsed here too, so a
deadline that could not be shown as a date is refused before it is stored.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import NoReturn, TypeAlias

from pyweft.errors import InvalidDurationError, PyweftError

DurationLike: TypeAlias = int | float | str | timedelta
"""What a duration option accepts: seconds, a ``timedelta``, or a string like ``"1h30m"``."""

MAX_DURATION_S = 36525 * 86400.0
"""The longest duration accepted: 36525 days (about 100 years).

Anything longer is a mistake (a unit slip, a sentinel such as ``1e300``), and
keeping every duration below it keeps ``now + duration`` a real date."""

_EXAMPLES = (
    'seconds as a number (90 or 1.5), a datetime.timedelta, or a string such as "90s", '
    '"1h30m", "1h 30m", "2 days", "1.5h", "500ms" or "3 weeks"'
)

# Decimal multipliers keep "1.1h" at exactly 3960.0 instead of 3960.0000000000005.
_UNIT_SECONDS: dict[str, Decimal] = {}
for _names, _seconds in (
    (("ms", "msec", "msecs", "millisecond", "milliseconds"), Decimal("0.001")),
    (("s", "sec", "secs", "second", "seconds"), Decimal(1)),
    (("m", "min", "mins", "minute", "minutes"), Decimal(60)),
    (("h", "hr", "hrs", "hour", "hours"), Decimal(3600)),
    (("d", "day", "days"), Decimal(86400)),
    (("w", "wk", "wks", "week", "weeks"), Decimal(604800)),
):
    for _name in _names:
        _UNIT_SECONDS[_name] = _seconds

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_BARE_NUMBER = re.compile(rf"\s*({_NUMBER})\s*")
_COMPONENT = re.compile(rf"({_NUMBER})\s*([a-z]+)")
_COMPONENTS = re.compile(rf"\s*(?:{_NUMBER}\s*[a-z]+\s*)+")


def parse_duration(value: DurationLike, *, field: str = "duration") -> float:
    """Return ``value`` as a number of seconds (zero up to :data:`MAX_DURATION_S`).

    ``field`` names the option in the error message, so a user who wrote
    ``timeout="3 dayz"`` is told which argument to fix.
    """
    if type(value) is float:
        if 0.0 <= value <= MAX_DURATION_S:  # NaN fails both comparisons
            return value
        _reject_number(value, field)
    if type(value) is int:
        if 0 <= value <= MAX_DURATION_S:
            return float(value)
        _reject_number(value, field)
    return _parse_slow(value, field)


def parse_optional_duration(value: DurationLike | None, *, field: str = "duration") -> float | None:
    """Like :func:`parse_duration`, but ``None`` (meaning "no limit") passes through."""
    if value is None:
        return None
    return parse_duration(value, field=field)


def format_duration(seconds: float) -> str:
    """Render seconds for humans: ``"1h30m"``, ``"2d4h"``, ``"1m30.5s"``, ``"250ms"``.

    The output is accepted by :func:`parse_duration`, rounded to the
    millisecond (to the microsecond below one second).
    """
    if not math.isfinite(seconds):
        return str(seconds)
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds < 1:
        micros = round(seconds * 1_000_000)
        if micros == 0:
            return "0s"
        if micros < 1_000_000:
            return _trim(f"{micros / 1000:.3f}") + "ms"
    total_ms = round(seconds * 1000)
    days, rest_ms = divmod(total_ms, 86_400_000)
    hours, rest_ms = divmod(rest_ms, 3_600_000)
    minutes, rest_ms = divmod(rest_ms, 60_000)
    parts = [f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if n]
    if rest_ms:
        parts.append(_trim(f"{rest_ms / 1000:.3f}") + "s")
    return "".join(parts) or "0s"


def _show(value: object) -> str:
    """``repr`` cut short, so a megabyte of garbage does not become a megabyte of message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _trim(number: str) -> str:
    return number.rstrip("0").rstrip(".")


_TOO_LONG = (
    "is too large to be a duration: the longest is 36525 days (about 100 years); "
    "pass None where no limit is meant"
)


def _reject_number(value: object, field: str) -> NoReturn:
    if isinstance(value, float) and math.isnan(value):
        reason = "is not a number"
    elif isinstance(value, float) and math.isinf(value):
        reason = "is infinite; pass None where no limit is meant"
    elif isinstance(value, int | float) and value > 0:
        reason = _TOO_LONG
    else:
        reason = "is negative; durations must be zero or more"
    raise InvalidDurationError(f"Invalid {field}: {_show(value)} {reason}. Use {_EXAMPLES}.")


def _parse_slow(value: object, field: str) -> float:
    """Everything but an exact int or float: subclasses, timedeltas and strings."""
    if isinstance(value, bool):
        raise InvalidDurationError(
            f"Invalid {field}: {_show(value)} is a bool, not a duration. Use {_EXAMPLES}."
        )
    if isinstance(value, float):
        return parse_duration(float(value), field=field)
    if isinstance(value, int):
        return parse_duration(int(value), field=field)
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise InvalidDurationError(
                f"Invalid {field}: {_show(value)} ({value.total_seconds()} seconds) is negative; "
                f"durations must be zero or more. Use {_EXAMPLES}."
            )
        seconds = value.total_seconds()
        if seconds > MAX_DURATION_S:
            raise InvalidDurationError(
                f"Invalid {field}: {_show(value)} {_TOO_LONG}. Use {_EXAMPLES}."
            )
        return seconds
    if isinstance(value, str):
        return _parse_text(value, field)
    raise InvalidDurationError(
        f"Invalid {field}: {_show(value)} (of type {type(value).__name__}) is not a duration. "
        f"Use {_EXAMPLES}."
    )


def _parse_text(text: str, field: str) -> float:
    lowered = text.lower()
    bare = _BARE_NUMBER.fullmatch(lowered)
    if bare is not None:
        return _finite(Decimal(bare.group(1)), text, field)
    if _COMPONENTS.fullmatch(lowered) is None:
        reason = (
            "is negative; durations must be zero or more"
            if lowered.strip().startswith("-")
            else "is not a duration"
        )
        raise InvalidDurationError(f"Invalid {field}: {_show(text)} {reason}. Use {_EXAMPLES}.")
    total = Decimal(0)
    for number, unit in _COMPONENT.findall(lowered):
        multiplier = _UNIT_SECONDS.get(unit)
        if multiplier is None:
            raise InvalidDurationError(
                f"Invalid {field}: {_show(text)} has an unknown unit {unit!r}; units are ms, s, m, "
                f"h, d and w (or their names, like 'minutes'). Use {_EXAMPLES}."
            )
        total += Decimal(number) * multiplier
    return _finite(total, text, field)


def _finite(total: Decimal, text: str, field: str) -> float:
    seconds = float(total)
    if not seconds <= MAX_DURATION_S:  # also catches the overflow to inf
        raise InvalidDurationError(f"Invalid {field}: {_show(text)} {_TOO_LONG}. Use {_EXAMPLES}.")
    return seconds


def parse_timestamp(
    value: object, *, field: str, error: type[PyweftError] = InvalidDurationError
) -> float:
    """Return a point in time as epoch seconds: an aware ``datetime`` or a number.

    The time must be one a ``datetime`` can hold (years 1 to 9999), so NaN,
    infinities and sentinels such as ``1e300`` are refused with ``error``
    instead of being stored as a deadline nobody can read back.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise error(
                f"{field} needs a timezone-aware datetime, got naive {value.isoformat()}; "
                "use datetime.now(timezone.utc) + timedelta(...)"
            )
        return value.timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            seconds = float(value)
            datetime.fromtimestamp(seconds, UTC)  # raises unless it is a real date
        except (OverflowError, ValueError, OSError):
            raise error(
                f"{field} must be a time between the years 1 and 9999, got {_show(value)}; "
                "pass an aware datetime or epoch seconds (time.time() + delay)"
            ) from None
        return seconds
    raise error(
        f"{field} must be an aware datetime or epoch seconds, got {_show(value)} "
        f"(of type {type(value).__name__})"
    )


__all__ = [
    "MAX_DURATION_S",
    "DurationLike",
    "format_duration",
    "parse_duration",
    "parse_optional_duration",
    "parse_timestamp",
]
