"""Malformed definitions fail when they are declared, not in the first run that uses them."""

from __future__ import annotations

import inspect
import math
from typing import Any

import pytest

from pyweft import (
    DefinitionError,
    InvalidArgumentError,
    InvalidDurationError,
    RetryPolicy,
    WorkflowContext,
    activity,
    workflow,
)
from pyweft.definitions import activity_definition_of, positional_arity, workflow_definition_of
from pyweft.engine.messages.reviews import Escalation
from pyweft.engine.replay.keys import check_text


@pytest.mark.parametrize("backoff", [math.nan, math.inf, -math.inf, 0.5, True])
def test_retry_backoff_must_be_a_finite_number_of_at_least_one(backoff: float) -> None:
    with pytest.raises(DefinitionError, match=r"backoff must be a finite number >= 1\.0"):
        RetryPolicy(backoff=backoff)


@pytest.mark.parametrize("field", ["initial_interval", "max_interval"])
@pytest.mark.parametrize("value", [math.nan, math.inf, 1e300])
def test_retry_intervals_must_be_real_durations(field: str, value: float) -> None:
    with pytest.raises(InvalidDurationError, match=field):
        RetryPolicy(**{field: value})


def test_a_large_backoff_to_a_high_power_waits_the_cap_instead_of_overflowing() -> None:
    policy = RetryPolicy(max_attempts=5000, initial_interval=1, backoff=1e300, max_interval=60)
    assert policy.delay_after(1) == 1.0
    assert policy.delay_after(3) == 60.0  # 1e600 would overflow a float
    doubling = RetryPolicy(max_attempts=5000, backoff=2.0, max_interval=60)
    assert doubling.delay_after(2000) == 60.0  # 2.0 ** 1999 is past float range


@pytest.mark.parametrize("option", ["timeout", "schedule_to_close"])
def test_an_activity_timeout_of_zero_is_refused_at_decoration(option: str) -> None:
    with pytest.raises(InvalidDurationError, match=f"{option} bounds") as caught:

        @activity(**{option: 0})
        async def work() -> None:
            return None

    assert "None for no limit" in str(caught.value)


@pytest.mark.parametrize("value", [math.nan, math.inf, -1, 1e300])
def test_an_activity_timeout_that_is_no_duration_is_refused_at_decoration(value: float) -> None:
    with pytest.raises(InvalidDurationError, match="timeout"):

        @activity(timeout=value)
        async def work() -> None:
            return None


def test_workflow_on_an_activity_is_refused() -> None:
    @activity
    async def charge(amount: int) -> int:
        return amount

    with pytest.raises(DefinitionError, match="already an @activity"):
        workflow(charge)


def test_activity_on_a_workflow_is_refused() -> None:
    @workflow
    async def checkout(ctx: WorkflowContext) -> None:
        return None

    with pytest.raises(DefinitionError, match="already a @workflow"):
        activity(checkout)
    with pytest.raises(DefinitionError, match="is a @workflow, not an activity"):
        activity_definition_of(checkout)  # what ctx.run(checkout) resolves


def test_workflow_whose_first_parameter_is_not_the_context_is_refused() -> None:
    with pytest.raises(DefinitionError, match="first parameter 'order' is annotated dict"):

        @workflow
        async def checkout(order: dict[str, Any]) -> None:
            return None


def test_workflow_without_any_parameter_is_refused() -> None:
    with pytest.raises(DefinitionError, match="WorkflowContext as its first parameter"):

        @workflow
        async def nothing() -> None:
            return None


def test_context_annotated_or_unannotated_first_parameters_are_accepted() -> None:
    @workflow
    async def annotated(ctx: WorkflowContext, order: dict[str, Any]) -> None:
        return None

    @workflow
    async def bare(ctx, order):  # type: ignore[no-untyped-def]
        return None

    @workflow
    async def loose(ctx: Any) -> None:
        return None

    @workflow
    async def wide(ctx: object) -> None:
        return None


def test_workflow_with_a_required_keyword_only_parameter_is_refused() -> None:
    with pytest.raises(DefinitionError, match="keyword-only parameter"):

        @workflow
        async def flagged(ctx: WorkflowContext, *, urgent: bool) -> None:
            return None

    @workflow
    async def optional_flag(ctx: WorkflowContext, *, urgent: bool = False) -> None:
        return None


@pytest.mark.parametrize("name", ["a\x1b[2Jb", "tab\there", "a\x7f", "a\x85", "a\ud800"])
def test_workflow_and_activity_names_with_control_characters_are_refused(name: str) -> None:
    with pytest.raises(DefinitionError, match="workflow name"):

        @workflow(name=name)
        async def wf(ctx: WorkflowContext) -> None:
            return None

    with pytest.raises(DefinitionError, match="activity name"):

        @activity(name=name)
        async def act() -> None:
            return None


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("", "non-empty"),
        (None, "non-empty"),
        ("x" * 300, "300 UTF-8 bytes"),
        ("é" * 128, "256 UTF-8 bytes"),
        ("\x00", "control character"),
        ("bell\x07", "control character"),
        ("line\nbreak", "control character"),
        ("csi\x9b", "control character"),
        ("lone\udc80", "lone surrogate"),
    ],
)
def test_ids_and_names_must_be_printable_text_within_the_byte_limit(
    value: object, fragment: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=fragment):
        check_text(value, "id", 255)


@pytest.mark.parametrize("value", ["order-1", "ordre/été/1", "注文:1", "a b", "emoji-🚀"])
def test_printable_unicode_ids_are_accepted(value: str) -> None:
    assert check_text(value, "id", 255) == value


def test_escalation_targets_must_be_a_list_of_names() -> None:
    with pytest.raises(InvalidArgumentError, match="list of names"):
        Escalation.parse({"after": "1h", "to": "lead"})
    with pytest.raises(InvalidArgumentError, match="control character"):
        Escalation(after=60, to=("lead\x1b",))
    with pytest.raises(InvalidDurationError, match="escalation after"):
        Escalation.parse({"after": math.inf, "action": "auto-approve"})
    assert Escalation.parse({"after": "1h", "to": ["lead"]}).to == ("lead",)


def _sig_a(ctx, x): ...  # type: ignore[no-untyped-def]
def _sig_b(ctx, x, y=1, *, z=2): ...  # type: ignore[no-untyped-def]
def _sig_c(ctx, *args): ...  # type: ignore[no-untyped-def]
def _sig_d(ctx, x, /, y, *rest, k=0, **kw): ...  # type: ignore[no-untyped-def]
def _sig_e(ctx, *, k): ...  # type: ignore[no-untyped-def]
def _sig_f(*args): ...  # type: ignore[no-untyped-def]
def _sig_g(ctx, a=1, b=2): ...  # type: ignore[no-untyped-def]


@pytest.mark.parametrize("fn", [_sig_a, _sig_b, _sig_c, _sig_d, _sig_e, _sig_f, _sig_g])
def test_positional_arity_agrees_with_signature_bind(fn: Any) -> None:
    signature = inspect.signature(fn)
    arity = positional_arity(signature)
    for count in range(6):  # the context included
        try:
            signature.bind(*range(count))
            binds = True
        except TypeError:
            binds = False
        if arity is None:
            assert not binds  # only a required keyword-only parameter gives no arity
            continue
        least, most = arity
        assert binds == (least <= count and (most is None or count <= most)), count


def test_a_start_with_the_wrong_number_of_arguments_is_still_refused_with_the_reason() -> None:
    @workflow
    async def two(ctx: WorkflowContext, a: int, b: int = 0) -> None:
        return None

    definition = workflow_definition_of(two)
    assert definition is not None
    assert definition.arity == (2, 3)
    definition.check_arguments((1,))
    definition.check_arguments((1, 2))
    for args in ((), (1, 2, 3)):
        with pytest.raises(InvalidArgumentError, match="cannot be started with"):
            definition.check_arguments(args)
