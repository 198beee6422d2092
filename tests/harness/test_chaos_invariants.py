"""The chaos run's invariant checks, fed recorded data: each must notice what breaks it."""

from __future__ import annotations

from harness.faults import ExecutedFault
from harness.invariants import (
    AccountImport,
    SentEmail,
    check_callbacks,
    check_emails,
    check_imports,
    check_poison,
    count_stale_writes,
)

KILL = ExecutedFault(30.0, "kill_instance", 1, 4242, "SIGKILL")


def test_each_event_once_holds() -> None:
    emails = [SentEmail("evt-1", 10.0), SentEmail("evt-2", 11.0)]
    result = check_emails(emails, {"evt-1", "evt-2"}, [KILL], faults_end=45.0)
    assert result.held
    assert result.numbers["duplicates"] == 0 and result.numbers["exactly_once"]


def test_a_duplicate_during_the_faults_is_counted_and_within_the_window() -> None:
    emails = [SentEmail("evt-1", 29.5), SentEmail("evt-1", 45.2), SentEmail("evt-2", 3.0)]
    result = check_emails(emails, {"evt-1", "evt-2"}, [KILL], faults_end=45.0)
    assert result.numbers["duplicates"] == 1
    assert result.numbers["duplicates_within_window"] == 1
    assert not result.numbers["exactly_once"]
    assert result.held  # the documented window: one duplicate after a crash
    [problem] = result.problems
    assert problem["event_id"] == "evt-1" and problem["within_documented_window"]
    assert problem["nearest_fault"] == {"kind": "kill_instance", "at": 30.0}


def test_a_duplicate_long_after_the_faults_breaks_the_invariant() -> None:
    emails = [SentEmail("evt-1", 80.0), SentEmail("evt-1", 81.0)]
    result = check_emails(emails, {"evt-1"}, [KILL], faults_end=45.0)
    assert not result.held
    assert result.numbers["duplicates_outside_window"] == 1


def test_a_duplicate_with_no_process_fault_near_its_first_copy_breaks_the_invariant() -> None:
    # During the fault window, but the only faults were server errors or network faults (or a
    # kill long before): an answer the app believed, not a crash. The app must find those out.
    emails = [SentEmail("evt-1", 12.0), SentEmail("evt-1", 28.0)]
    for executed in ([], [KILL], [ExecutedFault(5.0, "kill_instance", 2, 1, "SIGKILL")]):
        result = check_emails(emails, {"evt-1"}, executed, faults_end=45.0)
        assert not result.held and result.numbers["duplicates_outside_window"] == 1, executed
    not_carried_out = ExecutedFault(13.0, "pause_lease_holder", detail="no lease held",
                                    injected=False)  # fmt: skip
    assert not check_emails(emails, {"evt-1"}, [not_carried_out], faults_end=45.0).held
    restart = ExecutedFault(9.0, "restart_azurite", detail="down 3.0 s, data kept")
    assert check_emails(emails, {"evt-1"}, [restart], faults_end=45.0).held  # a cause


def test_three_copies_are_outside_the_window_even_during_faults() -> None:
    emails = [SentEmail("evt-1", t) for t in (20.0, 36.0, 52.0)]
    result = check_emails(emails, {"evt-1"}, [KILL], faults_end=45.0)
    assert not result.held and result.numbers["duplicates"] == 2


def test_a_missing_or_unexpected_email_breaks_the_invariant() -> None:
    result = check_emails([SentEmail("evt-9", 1.0)], {"evt-1"}, [], faults_end=45.0)
    assert not result.held
    assert result.numbers["missing"] == 1 and result.numbers["unexpected"] == 1


def test_stale_writes_are_rows_of_an_older_token_written_after_a_newer_one() -> None:
    # token 3 took over at t=10; token 2's rows before then are fine, the one at t=12 is stale
    rows = [(2, 5.0), (2, 9.0), (3, 10.0), (3, 11.0), (2, 12.0)]
    assert count_stale_writes(rows) == 1
    assert count_stale_writes([(2, 5.0), (3, 10.0), (3, 11.0)]) == 0
    assert count_stale_writes([(1, 20.0), (2, 5.0), (2, 15.0), (3, 10.0)]) == 2
    assert count_stale_writes([]) == 0


def _account(**changes: int) -> AccountImport:
    values = dict(expected_imported=100, imported=100, members_in_table=100, attempts=2,
                  completed_runs=1, files_left_in_incoming=0, stale_writes=0)  # fmt: skip
    values.update(changes)
    return AccountImport("acct-00", **values)


def test_imports_hold_with_one_completed_run_despite_a_takeover() -> None:
    result = check_imports([_account()])
    assert result.held and result.numbers["attempts"] == 2


def test_imports_break_on_no_completed_run_a_stale_write_or_missing_rows() -> None:
    for broken in (_account(completed_runs=0), _account(stale_writes=1), _account(imported=200),
                   _account(members_in_table=99), _account(files_left_in_incoming=1)):  # fmt: skip
        result = check_imports([_account(), broken])
        assert not result.held
        assert result.numbers["imported_once"] == 1


def test_a_rerun_after_a_lost_completion_is_counted_and_listed() -> None:
    result = check_imports([_account(), _account(completed_runs=2, attempts=3)])
    assert result.held  # the data shows one import: the re-run wrote nothing more
    assert result.numbers["reruns"] == 1 and result.numbers["exactly_one_completed_run"] == 1
    [problem] = result.problems
    assert problem["kind"] == "rerun" and problem["within_documented_window"]
    doubled = check_imports([_account(completed_runs=2, imported=200)])
    assert not doubled.held and [p["kind"] for p in doubled.problems] == ["import"]


def test_callbacks_once_or_same_key_repeat_hold() -> None:
    posts = [("j1", "j1"), ("j2", "j2"), ("j2", "j2")]
    result = check_callbacks(["j1", "j2"], posts, {"j1": 0, "j2": 0})
    assert result.held
    assert result.numbers["exactly_once"] == 1 and result.numbers["same_key_repeats"] == 1


def test_callbacks_break_on_a_missing_callback_or_another_key() -> None:
    missing = check_callbacks(["j1", "j2"], [("j1", "j1")], {"j1": 0})
    assert not missing.held and missing.numbers["missing"] == 1
    wrong = check_callbacks(["j1"], [("j1", "j1"), ("j1", "other")], {"j1": 0})
    assert not wrong.held and wrong.numbers["wrong_keys"] == 1
    failed = check_callbacks(["j1"], [("j1", "j1")], {"j1": 2})
    assert not failed.held and failed.numbers["failed_units"] == 2


def test_poison_holds_with_exactly_the_hostile_bodies() -> None:
    hostile = {"q-poison": ["bad", "worse"]}
    result = check_poison({"q-poison": ["worse", "bad", "bad"]}, hostile)
    assert result.held and result.numbers["hostile_repeat_copies"] == 1


def test_poison_breaks_on_a_legit_message_or_a_hostile_one_not_poisoned() -> None:
    hostile = {"q-poison": ["bad"]}
    legit = check_poison({"q-poison": ["bad"], "r-poison": ['{"event_id": "evt-1"}']}, hostile)
    assert not legit.held and legit.numbers["unexpected"] == 1
    absent = check_poison({}, hostile)
    assert not absent.held and absent.numbers["hostile_not_poisoned"] == 1
