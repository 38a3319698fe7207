"""The crash tests' ledger checker catches every re-run the promise forbids.

The SIGKILL tests are only as strong as ``crashkit.check_ledger``; these
hand-written ledgers show it flags each forbidden pattern and accepts the
allowed ones.
"""

from __future__ import annotations

from support import crashkit as kit

TOKENS = {"r/001": "async", "r/002": "flaky"}


def problems(
    text: str, killed: set[str] | None = None, committed_at: dict[str, float] | None = None
) -> list[str]:
    # Stamp line i with time i, so the times follow the order of the lines.
    stamped = [f"{line.strip()} {i}" for i, line in enumerate(text.strip().splitlines())]
    events = kit.parse_ledger("\n".join(stamped))
    return kit.check_ledger(events, TOKENS, killed or set(), committed_at).problems


CLEAN = """
    START a - - 0
    BEGIN a r 001 1
    END a r 001 1
    MARK a r 001 0
    BEGIN a r 002 1
    FAIL a r 002 1
    BEGIN a r 002 2
    END a r 002 2
    MARK a r 002 0
    DONE a - - 0
"""


def test_one_run_through_with_the_designed_retry_is_clean() -> None:
    assert problems(CLEAN) == []


def test_rerun_after_the_workflow_passed_the_step_is_flagged_even_across_a_kill() -> None:
    found = problems(
        """
        BEGIN a r 001 1
        END a r 001 1
        MARK a r 001 0
        BEGIN b r 001 2
        END b r 001 2
        MARK b r 001 0
        BEGIN b r 002 1
        FAIL b r 002 1
        BEGIN b r 002 2
        END b r 002 2
        """,
        killed={"a"},
    )
    assert len(found) == 1 and "a completed activity ran again" in found[0]


def test_rerun_of_an_ended_execution_whose_commit_was_cut_is_allowed() -> None:
    found = problems(
        """
        BEGIN a r 001 1
        END a r 001 1
        BEGIN b r 001 2
        END b r 001 2
        MARK b r 001 0
        BEGIN b r 002 1
        FAIL b r 002 1
        BEGIN b r 002 2
        END b r 002 2
        """,
        killed={"a"},
    )
    assert found == []


def test_rerun_in_the_same_process_or_after_a_clean_exit_is_flagged() -> None:
    same_process = """
        BEGIN a r 001 1
        END a r 001 1
        BEGIN a r 001 2
        END a r 001 2
        BEGIN a r 002 2
        END a r 002 2
    """
    assert any("same process" in p for p in problems(same_process, killed={"a"}))
    assert any("was not killed" in p for p in problems(same_process, killed=set()))


def test_missing_end_unexpected_failure_and_unplanned_calls_are_flagged() -> None:
    found = problems(
        """
        BEGIN a r 001 1
        FAIL a r 001 1
        BEGIN a r 003 1
        END a r 003 1
        """,
        killed={"a"},
    )
    assert any("only a flaky step's first run fails" in p for p in found)
    assert any("r/001: never completed" in p for p in found)
    assert any("r/002: never completed" in p for p in found)
    assert any("r/003: executed but no such activity call" in p for p in found)


def test_journal_holding_an_earlier_execution_than_the_last_one_is_flagged() -> None:
    # The kill came after the commit of #1 but before the workflow's MARK:
    # only the journal's finish time shows that #2 re-ran a committed step.
    ledger = """
        BEGIN a r 001 1
        END a r 001 1
        BEGIN b r 001 2
        END b r 001 2
        MARK b r 001 0
        BEGIN b r 002 1
        FAIL b r 002 1
        BEGIN b r 002 2
        END b r 002 2
    """
    assert problems(ledger, {"a"}, {"r/001": 3.5, "r/002": 9}) == []  # #2 committed
    found = problems(ledger, {"a"}, {"r/001": 1.5, "r/002": 9})  # #1 committed
    assert len(found) == 1 and "a committed activity ran again" in found[0]
