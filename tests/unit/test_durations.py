"""Durations: every accepted form, every rejected one, and formatting for humans."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyweft.durations import (
    MAX_DURATION_S,
    format_duration,
    parse_duration,
    parse_optional_duration,
    parse_timestamp,
)
from pyweft.errors import InvalidArgumentError, InvalidDurationError, PyweftError


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (0, 0.0),
        (90, 90.0),
        (1.5, 1.5),
        (0.0, 0.0),
        (10**9, 1e9),
        (MAX_DURATION_S, MAX_DURATION_S),
        (timedelta(days=36525), MAX_DURATION_S),
        (timedelta(0), 0.0),
        (timedelta(hours=1, minutes=30), 5400.0),
        (timedelta(milliseconds=250), 0.25),
    ],
)
def test_numbers_and_timedeltas_are_seconds(value: int | float | timedelta, seconds: float) -> None:
    assert parse_duration(value) == seconds
    assert type(parse_duration(value)) is float


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("1h30m", 5400.0),
        ("1h 30m", 5400.0),
        ("2 days", 172800.0),
        ("2d", 172800.0),
        ("1.5h", 5400.0),
        ("500ms", 0.5),
        ("3 weeks", 1814400.0),
        ("10 minutes", 600.0),
        ("1 hour", 3600.0),
        ("45", 45.0),
        ("1.5", 1.5),
        ("0", 0.0),
        ("0s", 0.0),
        (".5s", 0.5),
        ("2.s", 2.0),
        ("  7 s  ", 7.0),
        ("1H30M", 5400.0),
        ("1 Hour 30 Minutes", 5400.0),
        ("1d2h3m4s5ms", 93784.005),
        ("1w1d", 691200.0),
        ("1.1h", 3960.0),
    ],
)
def test_strings_in_every_documented_form_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("unit", "seconds"),
    [
        *((name, 0.001) for name in ("ms", "millisecond", "milliseconds")),
        *((name, 1.0) for name in ("s", "sec", "secs", "second", "seconds")),
        *((name, 60.0) for name in ("m", "min", "mins", "minute", "minutes")),
        *((name, 3600.0) for name in ("h", "hr", "hrs", "hour", "hours")),
        *((name, 86400.0) for name in ("d", "day", "days")),
        *((name, 604800.0) for name in ("w", "week", "weeks")),
    ],
)
def test_every_unit_name_is_understood_in_any_case(unit: str, seconds: float) -> None:
    assert parse_duration(f"2{unit}") == pytest.approx(2 * seconds)
    assert parse_duration(f"2 {unit.upper()}") == pytest.approx(2 * seconds)


def test_int_and_float_subclasses_are_accepted_like_their_base() -> None:
    class Seconds(float):
        pass

    class Count(int):
        pass

    assert parse_duration(Seconds(2.5)) == 2.5
    assert parse_duration(Count(3)) == 3.0


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (-1, "negative"),
        (-0.5, "negative"),
        (timedelta(seconds=-1), "negative"),
        ("-5s", "negative"),
        (True, "bool"),
        (False, "bool"),
        (math.nan, "not a number"),
        (math.inf, "infinite"),
        (-math.inf, "infinite"),
        (10**400, "too large"),
        ("9" * 400, "too large"),
        (1e300, "too large"),
        (10**12, "too large"),
        (MAX_DURATION_S + 1, "100 years"),
        ("36526d", "100 years"),
        ("1e300", "not a duration"),
        (timedelta.max, "too large"),
        ("", "not a duration"),
        ("   ", "not a duration"),
        ("abc", "not a duration"),
        ("1h30", "not a duration"),
        ("h", "not a duration"),
        ("1h, 30m", "not a duration"),
        ("1e3s", "unknown unit 'e'"),
        ("5 years", "unknown unit 'years'"),
        ("3 fortnights", "unknown unit 'fortnights'"),
        ("1.2.3s", "not a duration"),
        (None, "NoneType"),
        ([1], "list"),
        (b"5s", "bytes"),
    ],
)
def test_bad_durations_raise_an_error_that_quotes_the_value_and_names_the_field(
    value: object, fragment: str
) -> None:
    with pytest.raises(InvalidDurationError) as caught:
        parse_duration(value, field="retry.initial_interval")  # type: ignore[arg-type]
    error = caught.value
    message = str(error)
    assert error.code == "InvalidDurationError"
    assert isinstance(error, PyweftError)
    assert isinstance(error, ValueError)
    assert "retry.initial_interval" in message
    assert fragment in message
    assert '"1h30m"' in message  # valid examples are shown
    shown = repr(value)
    assert shown[:20] in message


def test_error_messages_do_not_repeat_huge_values_in_full() -> None:
    with pytest.raises(InvalidDurationError) as caught:
        parse_duration("x" * 10_000)
    assert len(str(caught.value)) < 400


def test_the_default_field_name_is_duration() -> None:
    with pytest.raises(InvalidDurationError, match="Invalid duration"):
        parse_duration("soon")


def test_optional_duration_passes_none_through_and_parses_the_rest() -> None:
    assert parse_optional_duration(None, field="timeout") is None
    assert parse_optional_duration("2m", field="timeout") == 120.0
    assert parse_optional_duration(5) == 5.0
    with pytest.raises(InvalidDurationError, match="timeout"):
        parse_optional_duration("later", field="timeout")


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (0, 0.0),
        (1_700_000_000.5, 1_700_000_000.5),
        (-86400, -86400.0),  # a time in the past is a time: a sleep until it returns at once
        (datetime(2030, 1, 1, tzinfo=UTC), datetime(2030, 1, 1, tzinfo=UTC).timestamp()),
        (datetime(9999, 12, 31, tzinfo=UTC), datetime(9999, 12, 31, tzinfo=UTC).timestamp()),
    ],
)
def test_points_in_time_are_epoch_seconds(value: datetime | float, seconds: float) -> None:
    assert parse_timestamp(value, field="start_at") == seconds


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (math.nan, "between the years 1 and 9999"),
        (math.inf, "between the years 1 and 9999"),
        (-math.inf, "between the years 1 and 9999"),
        (1e300, "between the years 1 and 9999"),
        (10**400, "between the years 1 and 9999"),
        (253_402_300_800, "between the years 1 and 9999"),  # 10000-01-01
        (datetime(2030, 1, 1), "naive"),
        (True, "of type bool"),
        ("2030-01-01", "of type str"),
        (None, "of type NoneType"),
    ],
)
def test_times_no_date_can_hold_are_refused_with_the_field_named(
    value: object, fragment: str
) -> None:
    with pytest.raises(InvalidDurationError) as caught:
        parse_timestamp(value, field="sleep_until")
    assert "sleep_until" in str(caught.value)
    assert fragment in str(caught.value)


def test_a_time_error_can_be_raised_as_another_typed_error() -> None:
    with pytest.raises(InvalidArgumentError, match="start_at"):
        parse_timestamp(math.nan, field="start_at", error=InvalidArgumentError)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.25, "250ms"),
        (0.0005, "0.5ms"),
        (0.0000001, "0s"),
        (1, "1s"),
        (1.2345, "1.234s"),
        (45, "45s"),
        (90.5, "1m30.5s"),
        (3600, "1h"),
        (5400, "1h30m"),
        (86400 * 2 + 3600 * 4, "2d4h"),
        (86400 + 1, "1d1s"),
        (59.9999, "1m"),
        (-90, "-1m30s"),
        (math.inf, "inf"),
    ],
)
def test_durations_format_compactly_for_humans(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False))
def test_formatted_durations_parse_back_to_within_a_millisecond(seconds: float) -> None:
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds, abs=0.0005)


@given(
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=1_000), st.sampled_from("smhdw")),
        min_size=1,
        max_size=5,
    )
)
def test_compound_strings_sum_their_parts(parts: list[tuple[int, str]]) -> None:
    unit = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    text = " ".join(f"{n}{u}" for n, u in parts)
    assert parse_duration(text) == sum(n * unit[u] for n, u in parts)
