"""What a job's output can do to the operator's terminal (issue 12 §5): nothing.

Every list command in its TTY (table) and piped (tsv) form, with server text that holds escape
sequences: tables show them as visible ``\\xNN``, tsv escapes them, JSON keeps them exactly.
"""

from __future__ import annotations

import json

import pytest
import respx

from tests.fixtures import wire
from tests.fixtures.clirun import Cli
from tests.fixtures.wire import AGENT, JOB, WS

# Clear the screen, set the window title (OSC … BEL), colour, a bare CR, C1 CSI, DEL.
EVIL = "\x1b[2J\x1b]0;pwned\x07\x1b[31mred\rover\x9b1mdel\x7f"
RAW = ("\x1b", "\x07", "\r", "\x9b", "\x7f")


# The list commands with free text (inspect-claims and jobs attempts carry only ids, states and
# times, which the client validates: see test_attempts_in_both_forms and
# tests/unit/cli/test_cli_admin.py).
LIST_COMMANDS = {
    "list": (["list"], f"{WS}/job-agents/{AGENT}/jobs", wire.page([wire.job(message=EVIL)])),
    "jobs list": (["jobs", "list"], f"{WS}/jobs", wire.page([wire.job(message=EVIL)])),
    "agents list": (["agents", "list"], f"{WS}/job-agents", wire.page([wire.agent(name=EVIL)])),
}


def _list_without_raw_controls(
    cli: Cli, mock_api: respx.MockRouter, name: str, *, tty: bool
) -> str:
    """The list command's stdout, which must not hold a raw control character."""
    args, url, payload = LIST_COMMANDS[name]
    mock_api.get(url).respond(200, json=payload)
    result = cli(*args, tty=tty)
    assert result.exit_code == 0, result.stderr
    assert not any(c in result.stdout for c in RAW), repr(result.stdout)
    return result.stdout


@pytest.mark.parametrize("name", list(LIST_COMMANDS))
def test_list_commands_on_a_tty_show_controls_visibly(
    cli: Cli, mock_api: respx.MockRouter, name: str
) -> None:
    stdout = _list_without_raw_controls(cli, mock_api, name, tty=True)
    assert "\\x1b" in stdout  # shown, not hidden


@pytest.mark.parametrize("name", list(LIST_COMMANDS))
def test_list_commands_piped_escape_controls_in_tsv(
    cli: Cli, mock_api: respx.MockRouter, name: str
) -> None:
    stdout = _list_without_raw_controls(cli, mock_api, name, tty=False)
    line = stdout.splitlines()[0]
    assert "\\x1b[2J\\x1b]0;pwned\\x07\\x1b[31mred\\rover\\x9b1mdel\\x7f" in line.split("\t")


def test_json_keeps_the_text_exactly(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.get(f"{WS}/jobs/{JOB}").respond(200, json=wire.job(message=EVIL))
    result = cli("jobs", "get", str(JOB), "--json")
    assert json.loads(result.stdout)["message"] == EVIL
    assert "\x1b" not in result.stdout  # JSON's own \\u001b escape


def test_jobs_get_on_a_tty_keeps_lines_and_shows_controls(
    cli: Cli, mock_api: respx.MockRouter
) -> None:
    message = "exit code 2\nfirst line\n\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\\nlast line"
    mock_api.get(f"{WS}/jobs/{JOB}").respond(
        200, json=wire.job(message=message, metadata={"k": EVIL})
    )
    result = cli("jobs", "get", str(JOB), tty=True)
    assert result.exit_code == 0, result.stderr
    assert not any(c in result.stdout for c in RAW), repr(result.stdout)
    assert "last line" in result.stdout and "first line" in result.stdout


def test_list_table_shows_the_last_lines_of_a_message(cli: Cli, mock_api: respx.MockRouter) -> None:
    tail = "\n".join(f"compiling unit {n}" for n in range(40))
    message = f"exit code 2\n{tail}\nerror: linker failed\n\n"
    mock_api.get(f"{WS}/job-agents/{AGENT}/jobs").respond(
        200, json=wire.page([wire.job(status="failure", message=message)])
    )
    result = cli("list", "--status", "failure", tty=True)
    assert result.exit_code == 0, result.stderr
    assert "error: linker failed" in result.stdout
    assert "compiling unit 0 " not in result.stdout
    # Piped, the whole message is kept (escaped).
    piped = cli("list", "--status", "failure")
    assert "compiling unit 0\\n" in piped.stdout


def test_truncation_never_cuts_an_escape(cli: Cli, mock_api: respx.MockRouter) -> None:
    agent_name = "a" * 76 + "\x1b]0;title\x07"
    mock_api.get(f"{WS}/job-agents").respond(200, json=wire.page([wire.agent(name=agent_name)]))
    result = cli("agents", "list", tty=True)
    assert result.exit_code == 0, result.stderr
    cell = next(line for line in result.stdout.splitlines() if "aaaa" in line)
    # 76 a's, then "\x1b" (4 characters) does not fit in 80 with the "…": cut before it.
    assert "a" * 76 + "…" in cell
    assert "\\x1" not in cell


def test_error_messages_show_controls_visibly(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.get(f"{WS}/jobs/{JOB}").respond(404, json=wire.error("NOT_FOUND", f"no job {EVIL}"))
    result = cli("jobs", "get", str(JOB), "--json")
    assert result.exit_code == 5
    human, line = result.stderr.splitlines()
    assert not any(c in human for c in RAW)
    assert json.loads(line)["error"]["message"] == f"no job {EVIL}"


def test_attempts_in_both_forms(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.get(f"{WS}/jobs/{JOB}/attempts").respond(
        200, json=[wire.attempt(1, "expired"), wire.attempt(2, None)]
    )
    table = cli("jobs", "attempts", str(JOB), tty=True)
    assert table.exit_code == 0, table.stderr
    assert "ATTEMPT" in table.stdout and "expired" in table.stdout
    piped = cli("jobs", "attempts", str(JOB))
    assert piped.exit_code == 0, piped.stderr
    rows = [line.split("\t") for line in piped.stdout.splitlines()]
    assert [row[:2] for row in rows] == [["1", "expired"], ["2", ""]]


# Issue 12 follow-up §6: a lone CR, VT, FF, NEL (and FS/GS/RS) is no line break in a list: it
# used to be split on by str.splitlines and shown as "⏎", where the README promises \xNN.
@pytest.mark.parametrize(
    ("char", "shown"),
    [("\r", "\\x0d"), ("\x0b", "\\x0b"), ("\x0c", "\\x0c"), ("\x85", "\\x85"), ("\x1e", "\\x1e")],
)
def test_list_table_shows_a_lone_line_control_as_its_escape(
    cli: Cli, mock_api: respx.MockRouter, char: str, shown: str
) -> None:
    message = f"exit code 1\nbefore{char}after"
    mock_api.get(f"{WS}/job-agents/{AGENT}/jobs").respond(
        200, json=wire.page([wire.job(status="failure", message=message)])
    )
    result = cli("list", "--status", "failure", tty=True)
    assert result.exit_code == 0, result.stderr
    assert f"before{shown}after" in result.stdout, result.stdout
    assert char not in result.stdout
    # The real line break still joins the two lines.
    assert "exit code 1 ⏎ before" in result.stdout


def test_list_table_takes_crlf_for_a_line_end(cli: Cli, mock_api: respx.MockRouter) -> None:
    mock_api.get(f"{WS}/job-agents/{AGENT}/jobs").respond(
        200, json=wire.page([wire.job(status="failure", message="exit code 1\r\nlast line\r\n")])
    )
    result = cli("list", "--status", "failure", tty=True)
    assert "exit code 1 ⏎ last line" in result.stdout, result.stdout
    assert "\\x0d" not in result.stdout


# Bidi embeddings, overrides and isolates, and the Unicode line/paragraph separators.
BIDI = "".join(map(chr, [*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029]))


@pytest.mark.parametrize("name", list(LIST_COMMANDS))
def test_bidi_controls_are_escaped_in_tables_and_tsv(
    cli: Cli, mock_api: respx.MockRouter, name: str
) -> None:
    args, url, _ = LIST_COMMANDS[name]
    text = f"ok {BIDI} done"
    payload = (
        wire.page([wire.agent(name=text)])
        if name == "agents list"
        else wire.page([wire.job(message=text)])
    )
    mock_api.get(url).respond(200, json=payload)
    escaped = "".join(f"\\u{ord(c):04x}" for c in BIDI)
    for tty in (True, False):
        result = cli(*args, tty=tty)
        assert result.exit_code == 0, result.stderr
        assert not any(c in result.stdout for c in BIDI), (tty, repr(result.stdout))
        assert "\\u202e" in result.stdout and "\\u2069" in result.stdout
        if not tty:
            assert f"ok {escaped} done" in result.stdout.splitlines()[0].split("\t")


def test_bidi_controls_are_kept_exactly_in_json_and_escaped_in_errors(
    cli: Cli, mock_api: respx.MockRouter
) -> None:
    mock_api.get(f"{WS}/jobs/{JOB}").respond(200, json=wire.job(message=BIDI))
    assert json.loads(cli("jobs", "get", str(JOB), "--json").stdout)["message"] == BIDI
    detail = cli("jobs", "get", str(JOB), tty=True)
    assert not any(c in detail.stdout for c in BIDI)
    mock_api.get(f"{WS}/jobs/{JOB}").respond(404, json=wire.error("NOT_FOUND", f"no job {BIDI}"))
    human = cli("jobs", "get", str(JOB)).stderr
    assert "\\u202e" in human and not any(c in human for c in BIDI)


def _log_page(*pieces: bytes, stream: str = "stdout") -> dict[str, object]:
    import base64

    chunks = [
        {
            "seq": i,
            "offset": i,
            "stream": stream,
            "at": wire.T0,
            "data": base64.b64encode(p).decode(),
        }
        for i, p in enumerate(pieces, start=1)
    ]
    return {
        "jobId": str(JOB),
        "attempt": 1,
        "chunks": chunks,
        "nextSeq": len(pieces) + 1,
        "ended": True,
        "outcome": "completed",
        "jobStatus": "successful",
    }


@pytest.mark.parametrize("tty", [True, False])
def test_jobs_logs_shows_controls_on_a_tty_and_passes_bytes_piped(
    cli: Cli, mock_api: respx.MockRouter, tty: bool
) -> None:
    # "é" split across two chunks stays one character on a terminal.
    pieces = [EVIL.encode() + b"\n caf\xc3", b"\xa9\n"]
    route = mock_api.get(f"{WS}/jobs/{JOB}/logs")
    route.side_effect = [
        respx.MockResponse(200, json=_log_page(*pieces)),
        respx.MockResponse(200, json={**_log_page(), "nextSeq": 3}),
    ]
    result = cli("jobs", "logs", str(JOB), tty=tty)
    assert result.exit_code == 0, result.stderr
    if tty:
        assert not any(c in result.stdout for c in RAW), repr(result.stdout)
        assert "\\x1b[2J" in result.stdout and " café\n" in result.stdout
    else:
        assert result.stdout_bytes == b"".join(pieces)
