"""The one exit-code decision: every verdict has a code, and the table is the documented one."""

from __future__ import annotations

import inspect
import signal
from pathlib import Path

import pytest

from jobagentctl.supervisor.outcome import Outcome, StopReason, Verdict, exit_code
from jobagentctl.supervisor.process import watchdog

DOCS = Path(__file__).resolve().parents[3] / "docs" / "run.md"


def _table(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("|")]


def test_the_docstring_table_is_the_table_in_docs_run_md() -> None:
    table = _table(inspect.getdoc(exit_code) or "")
    assert len(table) > 10
    docs = DOCS.read_text()
    section = docs[docs.index("## Exit codes") :]
    section = section[: section.index("\n## ", 1)]
    assert _table(section) == table


@pytest.mark.parametrize(
    ("outcome", "code"),
    [
        (Outcome(Verdict.COMPLETED, 0), 0),
        (Outcome(Verdict.STOPPED), 0),
        (Outcome(Verdict.COMPLETED, 3), 3),
        (Outcome(Verdict.COMPLETED, -9), 137),
        (Outcome(Verdict.NO_JOB), 7),
        (Outcome(StopReason.LEASE_LOST, 0), 75),
        (Outcome(StopReason.TIMEOUT, -15), 124),
        (Outcome(Verdict.FAILED, 0), 125),
        (Outcome(Verdict.NOT_STARTED, 126), 126),
        (Outcome(Verdict.NOT_STARTED, 127), 127),
        (Outcome(StopReason.INTERRUPTED, 0, signal.SIGINT), 130),
        (Outcome(StopReason.CANCELLED, -15), 143),
    ],
)
def test_each_verdict_has_its_documented_code(outcome: Outcome, code: int) -> None:
    assert exit_code(outcome) == code


@pytest.mark.parametrize("verdict", [*Verdict, *StopReason])
def test_every_verdict_and_stop_reason_is_in_the_table_and_has_a_code(
    verdict: Verdict | StopReason,
) -> None:
    table = "\n".join(_table(inspect.getdoc(exit_code) or ""))
    assert f"| {verdict.value} " in table
    assert exit_code(Outcome(verdict, 0, signal.SIGTERM)) >= 0


def test_verdicts_and_stop_reasons_never_share_a_value() -> None:
    # One --report `verdict` field spells both: a value must say which it is.
    assert not {v.value for v in Verdict} & {r.value for r in StopReason}


def test_the_watchdog_stops_for_a_stop_reason() -> None:
    # watchdog.py imports nothing of ours: the word it writes to the stop-reason file and says
    # on the status pipe must be the value the supervisor reads back.
    assert StopReason(watchdog.STOP_REASON) is StopReason.LEASE_LOST
