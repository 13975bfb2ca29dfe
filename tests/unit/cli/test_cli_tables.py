"""List tables on an 80-column terminal: `list`, `jobs list`, `inspect-claims` and `agents
list` draw one line per row (no row wraps), ids shortened to unambiguous prefixes and agents
by name, columns giving way rather than shrinking to one letter; a state or status is whole."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
import respx

from jobagentctl.cli.output import VIEWS, fit_list
from tests.fixtures import wire
from tests.fixtures.clirun import Cli
from tests.fixtures.wire import AGENT, WS

# Time-ordered ids (UUID v7) made close together share their first hex digits.
JOBS = [UUID(f"01a24e69-{n}fbb-7e94-b888-d9bd9836f800") for n in range(5)]
MESSAGE = "make: *** [Makefile:21: lint] Error 1 " * 3
NAME = "builder-linux-amd64-large-runner"
STATES = ("active", "expired", "revoked", "unleased", "active")


def _jobs() -> list[dict[str, Any]]:
    statuses = ("queued", "inProgress", "failure", "successful", "actionRequired")
    return [
        wire.job(
            id=str(job),
            status=status,
            message=MESSAGE,
            externalId="run-" + "9" * 30,
            startedAt=wire.T0,
            completedAt=wire.T0,
        )
        for job, status in zip(JOBS, statuses, strict=True)
    ]


def _claims() -> list[dict[str, Any]]:
    return [
        wire.claim_row(state, jobId=str(job), lastHeartbeatAt=wire.T0, claimExpiresAt=wire.T0)
        for job, state in zip(JOBS, STATES, strict=True)
    ]


def _agents() -> list[dict[str, Any]]:
    agents = [wire.agent(id=str(AGENT), name=NAME, state="busy", lastSeenAt=wire.T0)]
    for n in range(4):
        agents.append(
            wire.agent(
                id=f"01a24e69-0000-7000-8000-00000000000{n}",
                name=f"{NAME}-{n}",
                type="http-pull",
                state="offline",
                lastSeenAt=wire.T0,
            )
        )
    return agents


@pytest.mark.parametrize(
    ("args", "path", "body", "whole"),
    [
        (["list", "--status", "all"], f"{WS}/job-agents/{AGENT}/jobs", _jobs, "actionRequired"),
        (["jobs", "list"], f"{WS}/jobs", _jobs, "actionRequired"),
        (["inspect-claims"], f"{WS}/job-claims", _claims, "unleased"),
        (["agents", "list"], f"{WS}/job-agents", _agents, "offline"),
    ],
)
def test_a_list_at_80_columns_has_one_line_per_row(
    cli: Cli,
    mock_api: respx.MockRouter,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    path: str,
    body: Any,
    whole: str,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    items = body()
    mock_api.get(path).respond(200, json=wire.page(items))
    if path != f"{WS}/job-agents":
        mock_api.get(f"{WS}/job-agents").respond(200, json=wire.page(_agents()))
    result = cli(*args, tty=True)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    # The title, the header, the rule, then exactly one line per row.
    assert len(lines) == 3 + len(items), result.stdout
    assert all(len(line) <= 80 for line in lines), result.stdout
    header = lines[1].split()
    assert "…" not in lines[1], header  # no column cut to a letter
    rows = lines[3:]
    assert any(f" {whole}" in row for row in rows)  # a state or status is whole
    firsts = [row.split()[0] for row in rows]
    assert len(set(firsts)) == len(firsts)  # the (short) ids tell the rows apart
    if args[0] != "agents":
        assert all(
            str(item.get("id") or item["jobId"]).replace("-", "").startswith(first)
            for item, first in zip(items, firsts, strict=True)
        )
        assert NAME[:10] in rows[0]  # the agent by name


def test_a_wide_terminal_keeps_whole_ids_and_every_column(
    cli: Cli, mock_api: respx.MockRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    mock_api.get(f"{WS}/jobs").respond(200, json=wire.page(_jobs()))
    lines = cli("jobs", "list", tty=True).stdout.splitlines()
    assert str(JOBS[0]) in lines[3]
    assert lines[1].split() == [
        "JOB", "STATUS", "AGENT", "CREATED", "STARTED", "COMPLETED", "EXTERNAL", "ID", "MESSAGE"
    ]  # fmt: skip


def test_the_message_narrows_before_more_useful_columns_go() -> None:
    columns = VIEWS["job"].columns
    cells = [
        ["01a24e692f", "failure", "builder", "2m ago", "-", "-", "-", "x" * 60 + " the end"],
    ]
    header, _, row = fit_list(columns, cells, 60)
    assert header.split() == ["JOB", "STATUS", "AGENT", "CREATED", "MESSAGE"]
    assert row.endswith("the end") and len(row) <= 60
