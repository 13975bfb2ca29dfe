"""The child's files and environment (jobfiles.py), its start-up errors and its group."""

from __future__ import annotations

import json
import os
import stat
import time
import uuid
from pathlib import Path

import pytest

from jobagentctl.models import ClaimedJob
from jobagentctl.supervisor.options import RunOptions
from jobagentctl.supervisor.outcome import StopReason
from jobagentctl.supervisor.process.child import Child, SpawnError
from jobagentctl.supervisor.process.jobfiles import (
    JobFiles,
    child_environment,
    sweep_stale_job_files,
)
from tests.fixtures.fake_client import claimed_job
from tests.fixtures.wire import claimed


def options(**overrides: object) -> RunOptions:
    base: dict[str, object] = {
        "command": ["true"],
        "agent_id": uuid.uuid4(),
        "url": "http://server:8080",
        "workspace_id": uuid.uuid4(),
        "api_key": "jac_prefix.secret",
    }
    base.update(overrides)
    return RunOptions(**base)  # type: ignore[arg-type]


def test_job_file_is_private_and_removed() -> None:
    job = claimed_job()
    files = JobFiles(job)
    try:
        assert stat.S_IMODE(files.job_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(files.directory.stat().st_mode) == 0o700
        data = json.loads(files.job_file.read_text())
        assert data["id"] == str(job.id)
        assert data["claimId"] == str(job.claim_id)
        assert data["jobAgentConfig"] == {"script": "demo"}
        assert not files.stop_reason_file.exists()
        files.write_stop_reason(StopReason.TIMEOUT)
        assert files.stop_reason_file.read_text() == "timeout\n"
    finally:
        files.remove()
    assert not files.directory.exists()


def test_job_file_keeps_the_servers_timestamps() -> None:
    sent = claimed(createdAt="2026-05-01T10:00:00.389Z", claimedAt="2026-05-01T10:00:01.5Z")
    del sent["claimId"]  # a V1 claim: the field is absent on the wire
    files = JobFiles(ClaimedJob.from_wire(sent))
    try:
        data = json.loads(files.job_file.read_text())
    finally:
        files.remove()
    assert data["createdAt"] == "2026-05-01T10:00:00.389Z"  # not ".389000Z"
    assert data["claimedAt"] == "2026-05-01T10:00:01.5Z"
    assert data["claimId"] is None  # every field is there, as before
    assert data["releaseId"] == ""


def test_environment_carries_the_job_but_not_the_key() -> None:
    job = claimed_job(lease_seconds=45, attempt=3)
    opts = options()
    files = JobFiles(job)
    try:
        base = {
            "PATH": "/bin",
            "JOBAGENTCTL_API_KEY": "jac_prefix.secret",
            "JOBAGENTCTL_API_KEY_FILE": "/run/secrets/key",
            "CTRLPLANE_API_KEY": "ctrlplane-secret",
            "JOBAGENTCTL_CLAIM_ID": "stale",
        }
        env = child_environment(base, job, opts, files)
    finally:
        files.remove()
    assert env["PATH"] == "/bin"
    assert "JOBAGENTCTL_API_KEY" not in env
    assert "JOBAGENTCTL_API_KEY_FILE" not in env
    assert "CTRLPLANE_API_KEY" not in env
    assert "secret" not in json.dumps(env)
    assert env["JOBAGENTCTL_JOB_ID"] == str(job.id)
    assert env["JOBAGENTCTL_CLAIM_ID"] == str(job.claim_id)
    assert env["JOBAGENTCTL_ATTEMPT"] == "3"
    assert env["JOBAGENTCTL_LEASE_SECONDS"] == "45"
    assert env["JOBAGENTCTL_WORKSPACE"] == str(opts.workspace_id)
    assert env["JOBAGENTCTL_AGENT"] == str(opts.agent_id)
    assert env["JOBAGENTCTL_URL"] == "http://server:8080"
    assert env["JOBAGENTCTL_JOB_FILE"] == str(files.job_file)
    assert env["JOBAGENTCTL_STOP_REASON_FILE"] == str(files.stop_reason_file)


def test_pass_api_key_hands_over_the_resolved_key() -> None:
    job = claimed_job()
    files = JobFiles(job)
    try:
        env = child_environment({}, job, options(pass_api_key=True), files)
    finally:
        files.remove()
    assert env["JOBAGENTCTL_API_KEY"] == "jac_prefix.secret"


def test_unleased_claim_has_no_claim_id_and_lease_zero() -> None:
    job = claimed_job(leased=False)
    files = JobFiles(job)
    try:
        env = child_environment({"JOBAGENTCTL_CLAIM_ID": "old"}, job, options(), files)
    finally:
        files.remove()
    assert "JOBAGENTCTL_CLAIM_ID" not in env
    assert env["JOBAGENTCTL_LEASE_SECONDS"] == "0"


def test_missing_command_is_127(tmp_path: Path) -> None:
    with pytest.raises(SpawnError) as info:
        Child.start([str(tmp_path / "nope")], dict(os.environ), capture=True)
    assert info.value.exit_code == 127
    assert "command not found" in info.value.message


def test_not_executable_is_126(tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    with pytest.raises(SpawnError) as info:
        Child.start([str(script)], dict(os.environ), capture=True)
    assert info.value.exit_code == 126
    assert "not executable" in info.value.message


def test_child_leads_its_own_process_group() -> None:
    child = Child.start(["sh", "-c", "sleep 30"], dict(os.environ), capture=False)
    try:
        assert os.getpgid(child.pid) == child.pgid == child.pid
        assert os.getsid(child.pid) == child.pid
        assert os.getpgid(child.pgid) != os.getpgrp()
    finally:
        child.kill_leftovers()
        child.wait(30)
    assert child.returncode == -9
    # The group's other members (sh may fork sleep) die asynchronously: poll, with a deadline.
    deadline = time.monotonic() + 30
    while child.signal_group(0) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not child.signal_group(0)  # nothing left in the group


def test_sweep_removes_only_old_directories_whose_run_is_gone(short_tempdir: Path) -> None:
    tmp_path = short_tempdir
    old = time.time() - 3600
    live, dead, young = JobFiles(claimed_job()), JobFiles(claimed_job()), JobFiles(claimed_job())
    os.close(dead._lock_fd)  # as if its run had been SIGKILLed: the kernel drops the lock
    os.close(young._lock_fd)
    stranger = tmp_path / "jobagentctl-job-not-ours"
    stranger.mkdir()
    for path in (live.directory, dead.directory, stranger):
        os.utime(path, (old, old))
    try:
        assert sweep_stale_job_files() == 1
        assert not dead.directory.exists()
        assert live.directory.exists()  # its run holds the lock
        assert young.directory.exists()  # its run may not have locked it yet
        assert stranger.exists()  # no lock file: not a job directory
    finally:
        live.remove()
