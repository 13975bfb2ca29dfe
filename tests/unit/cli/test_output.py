"""Output helpers: RFC 3339 UTC, relative ages, tsv escaping, env quoting, colour switches."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime, timedelta, timezone

import pytest

from jobagentctl.cli import output
from jobagentctl.cli.context import AppState
from jobagentctl.models import Job
from tests.fixtures import wire


def test_rfc3339_is_utc_with_z() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert output.rfc3339(datetime(2024, 5, 1, 14, 0, tzinfo=plus_two)) == "2024-05-01T12:00:00Z"
    assert output.rfc3339(datetime(2024, 5, 1, 12, 0)) == "2024-05-01T12:00:00Z"


def test_relative_ages() -> None:
    now = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert output.relative(now - timedelta(seconds=200), now) == "3m20s ago"
    assert output.relative(now + timedelta(seconds=45), now) == "in 45s"
    assert output.relative(now, now) == "now"
    assert output.relative(None, now) == "-"


def test_json_of_a_model_uses_wire_names_and_utc() -> None:
    job = Job.model_validate(wire.job(createdAt="2024-05-01T14:00:00+02:00"))
    data = output.to_jsonable(job)
    assert data["createdAt"] == "2024-05-01T12:00:00Z"
    assert data["jobAgentId"] == str(wire.AGENT)
    assert data["status"] == "queued"


def test_tsv_escapes_what_would_break_rows(capsys: pytest.CaptureFixture[str]) -> None:
    job = Job.model_validate(wire.job(message="a\tb\nc\\d", externalId=None))
    output.emit(AppState(output_flag="tsv"), "job", [job])
    line = capsys.readouterr().out
    assert line.count("\n") == 1
    fields = line.rstrip("\n").split("\t")
    assert len(fields) == len(output.VIEWS["job"].columns)
    assert fields[-1] == "a\\tb\\nc\\\\d"
    assert fields[-2] == ""


def test_tsv_prints_timestamps_as_the_server_wrote_them(capsys: pytest.CaptureFixture[str]) -> None:
    sent = Job.from_wire(wire.job(createdAt="2026-05-01T10:00:00.389Z"))
    ours = Job.model_validate(wire.job(createdAt="2026-05-01T10:00:00.389Z"))
    output.emit(AppState(output_flag="tsv"), "job", [sent, ours])
    first, second = capsys.readouterr().out.splitlines()
    assert "\t2026-05-01T10:00:00.389Z\t" in first  # as ctrlplane wrote it
    assert "\t2026-05-01T10:00:00.389000Z\t" in second  # not parsed from a response: RFC 3339


def test_env_lines_are_shell_quoted(capsys: pytest.CaptureFixture[str]) -> None:
    output.emit_env(AppState(output_flag="env"), {"A": "it's $(rm -rf ~)", "B": None, "C": 7})
    lines = capsys.readouterr().out.splitlines()
    assert shlex.split(lines[0]) == ["export", "A=it's $(rm -rf ~)"]
    assert lines[1] == "export B=''"
    assert lines[2] == "export C=7"


def test_colour_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    assert AppState().color
    assert not AppState(no_color=True).color
    monkeypatch.setenv("NO_COLOR", "1")
    assert not AppState().color
    assert output._console(AppState()).no_color


def test_server_text_is_not_rich_markup(capsys: pytest.CaptureFixture[str]) -> None:
    job = Job.model_validate(wire.job(message="[bold red]boom[/] :smile:"))
    output.emit(AppState(output_flag="table"), "job", [job])
    assert "[bold red]boom[/] :smile:" in capsys.readouterr().out


def test_spinner_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from jobagentctl.cli import context

    drawn: list[str] = []

    class FakeConsole:
        def status(self, text: str) -> object:
            import contextlib

            drawn.append(text)
            return contextlib.nullcontext()

    monkeypatch.setattr(output, "_console", lambda state, stderr=False: FakeConsole())
    monkeypatch.setattr(context, "stderr_is_tty", lambda: False)
    with output.spinner(AppState(), "waiting"):
        pass
    assert drawn == []
    monkeypatch.setattr(context, "stderr_is_tty", lambda: True)
    with output.spinner(AppState(quiet=True), "waiting"):
        pass
    with output.spinner(AppState(), "waiting", enabled=False):
        pass
    assert drawn == []
    with output.spinner(AppState(), "waiting"):
        pass
    assert drawn == ["waiting"]
