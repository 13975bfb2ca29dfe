"""Earlier releases against a database migrated by this one, as in a rolling upgrade (new
replicas migrated, old ones still serving): each release is taken from this repository's own
history (``git archive COMMIT src``) and run from its sources (``PYTHONPATH``) on this venv's
interpreter and dependencies, on both databases.

- the previous release (schema 0001-0005): a server of it on a HEAD-migrated database serves
  enqueue, claim, heartbeat and complete; its ``server create-workspace`` works.
- the round-1 release (schema 0001 only; its job INSERT names no workspace, its workspace
  INSERT no slug): enqueue and ``server create-workspace``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.cli import clean_env, run_cli
from tests.fixtures.databases import sql
from tests.fixtures.live_server import FAST_SETTINGS, LiveServer

REPO = Path(__file__).resolve().parents[3]
PREVIOUS = "3c62f62"  # the last round's release: schema 0001-0005
ROUND_ONE = "7fd85c5"  # the first release: schema 0001


@pytest.fixture(scope="session")
def releases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """``{commit: its src directory}``, extracted once per session."""
    root = tmp_path_factory.mktemp("releases")
    found: dict[str, Path] = {}
    for commit in (PREVIOUS, ROUND_ONE):
        present = subprocess.run(
            ["git", "-C", str(REPO), "cat-file", "-e", f"{commit}^{{commit}}"],
            capture_output=True,
            check=False,
        )
        if present.returncode != 0:
            continue
        target = root / commit
        target.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", commit, "src"], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
        found[commit] = target / "src"
    yield found


def _release(releases: dict[str, Path], commit: str) -> Path:
    if commit not in releases:
        pytest.skip(
            f"release {commit} is not in this clone's history (a shallow clone?): "
            "CI clones main with its history"
        )
    return releases[commit]


class OldServer(LiveServer):
    """A server of an earlier release (its sources first on ``PYTHONPATH``)."""

    def __init__(self, src: Path, *args: Any, **kwargs: Any) -> None:
        self.src = src
        super().__init__(*args, **kwargs)

    def base_env(self) -> dict[str, str]:
        return {**super().base_env(), "PYTHONPATH": str(self.src)}


@pytest.fixture
def head_server(database_url: str, tmp_path: Path) -> LiveServer:
    """A database migrated by this release (``server init``: schema, workspace, key); no
    process of this release is started."""
    server = LiveServer(database_url, tmp_path / "head", FAST_SETTINGS)
    server.init()
    return server


def _old_server(src: Path, head: LiveServer, tmp_path: Path) -> Iterator[OldServer]:
    old = OldServer(
        src,
        head.database_url,
        tmp_path / "old",
        FAST_SETTINGS,
        workspace_id=head.workspace_id,
        api_key=head.api_key,
    )
    try:
        old.start()
        yield old
    finally:
        old.stop(timeout=15)
        old.kill()


def _version(src: Path) -> str:
    ran = run_cli("--version", env=clean_env(PYTHONPATH=str(src)))
    return ran.stdout.strip()


def _create_workspace(old: OldServer, name: str) -> str:
    ran = run_cli(
        "server", "create-workspace", "-o", "json", "--database", old.database_url, name,
        env=old.base_env(),
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert '"apiKey"' in ran.stdout
    rows = sql(old.database_url, "SELECT slug FROM workspace WHERE name = " + _param(old), [name])
    assert len(rows) == 1 and rows[0][0], rows
    return str(rows[0][0])


def _param(server: LiveServer) -> str:
    return "?" if server.database_url.startswith("sqlite") else "%s"


def _enqueue(old: OldServer) -> tuple[str, str]:
    agent = old.create_agent("old-agent")
    job = old.enqueue(agent, job_agent_config={"from": "old"})
    workspace = sql(
        old.database_url, "SELECT workspace_id FROM job WHERE id = " + _param(old), [job["id"]]
    )
    assert [str(row[0]) for row in workspace] == [old.workspace_id]
    return agent, str(job["id"])


def test_previous_release_serves_on_a_head_migrated_database(
    releases: dict[str, Path], head_server: LiveServer, tmp_path: Path
) -> None:
    src = _release(releases, PREVIOUS)
    assert _version(src) != _version(REPO / "src")  # two releases a user can tell apart
    for old in _old_server(src, head_server, tmp_path):
        agent, job_id = _enqueue(old)
        status, claimed = old.request("POST", f"job-agents/{agent}/claim", {"leaseSeconds": 30})
        assert (status, claimed["id"]) == (200, job_id), claimed
        claim = {"claimId": claimed["claimId"]}
        status, beat = old.request("POST", f"jobs/{job_id}/heartbeat", claim)
        assert (status, beat["claimId"]) == (200, claim["claimId"]), beat
        done = {**claim, "status": "successful"}
        status, body = old.request("PUT", f"jobs/{job_id}/status", done)
        assert status == 202, body
        assert old.get_job(job_id)["status"] == "successful"
        _create_workspace(old, "Old Release Team")


def test_round_one_release_enqueues_and_creates_workspaces_on_a_head_migrated_database(
    releases: dict[str, Path], head_server: LiveServer, tmp_path: Path
) -> None:
    src = _release(releases, ROUND_ONE)
    for old in _old_server(src, head_server, tmp_path):
        _enqueue(old)
        assert _create_workspace(old, "Round One Team") == "round-one-team"
