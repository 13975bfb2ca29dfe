"""Every client command against the ctrlplane stand-in: exit codes, stdout and stderr.

The README's table "Against ctrlplane itself" names these tests. In-process runs (CliRunner)
still speak HTTP to the stand-in; `run` runs as a real process.
"""

from __future__ import annotations

import json
from typing import Any

from tests.fixtures.cli import run_cli
from tests.fixtures.ctrlplane_standin import CtrlplaneStandIn, Request
from tests.fixtures.server_cli import Ran, env_for, jac

NO_LEASES = "no lease support"


def cp(server: CtrlplaneStandIn, *args: str, agent: str | None = None, **env: str) -> Ran:
    return jac(server, *args, agent=agent, env=env)


def run_process(server: CtrlplaneStandIn, *args: str, agent: str, timeout: float = 120) -> Ran:
    """``jobagentctl ARGS`` as a real process (the installed console script)."""
    return run_cli(*args, env=env_for(server, agent), timeout=timeout)


def raw(server: CtrlplaneStandIn, job_id: str) -> dict[str, Any]:
    with server.state.lock:
        return server.state.job_response(server.state.jobs[job_id])


def test_jobs_list_and_get_print_what_ctrlplane_sent(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    orphan = ctrlplane.seed_job(agent, "failure", message="boom")
    kept = ctrlplane.seed_job(ctrlplane.add_agent(), "queued", dispatch_context={"a": 1})
    assert cp(ctrlplane, "agents", "delete", agent).returncode == 0
    listed = cp(ctrlplane, "jobs", "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    items = {job["id"]: job for job in json.loads(listed.stdout)}
    assert set(items) == {orphan, kept}
    assert items[orphan]["jobAgentId"] == ""  # the agent was deleted; ctrlplane keeps the job
    for job_id, printed in items.items():
        sent = raw(ctrlplane, job_id)
        # Value for value (timestamps as ctrlplane wrote them), nothing invented (no null
        # fields), nothing dropped, in ctrlplane's order.
        assert printed == sent
        assert list(printed) == list(sent)
        assert None not in printed.values()
    got = cp(ctrlplane, "jobs", "get", orphan, "-o", "json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == raw(ctrlplane, orphan)
    assert cp(ctrlplane, "jobs", "get", orphan).returncode == 0  # tsv as well
    tsv = cp(ctrlplane, "jobs", "list")
    assert tsv.returncode == 0 and orphan in tsv.stdout


def _whole_milliseconds(server: CtrlplaneStandIn, job_id: str) -> None:
    """Timestamps ending ``.000Z`` and ``.120Z``: a datetime re-rendered by the client would
    print them ``…Z`` and ``….120000Z``."""
    with server.state.lock:
        job = server.state.jobs[job_id]
        job.created_at = job.created_at.replace(microsecond=0)
        job.updated_at = job.updated_at.replace(microsecond=120_000)


def test_every_json_command_prints_what_ctrlplane_sent(ctrlplane: CtrlplaneStandIn) -> None:
    """Each -o json command against the stand-in: stdout is the JSON ctrlplane answered with,
    value for value and in its order (a list: its page's items)."""
    agent = ctrlplane.add_agent("builder")
    failed = ctrlplane.seed_job(agent, "failure", message="boom", external_id="ci-1")
    queued = ctrlplane.seed_job(agent, dispatch_context={"a": 1})
    later = ctrlplane.seed_job(agent)
    untouched = ctrlplane.seed_job(agent, "successful")
    for job in (failed, queued, later, untouched):
        _whole_milliseconds(ctrlplane, job)
    commands: list[tuple[list[str], str, str]] = [
        (["jobs", "get", failed], "GET", f"/jobs/{failed}"),
        (["jobs", "list"], "GET", "/jobs"),
        (["list"], "GET", f"/job-agents/{agent}/jobs"),
        (["list", "--status", "failure"], "GET", f"/job-agents/{agent}/jobs"),
        (["agents", "list"], "GET", "/job-agents"),
        (["agents", "get", agent], "GET", f"/job-agents/{agent}"),
        (["agents", "register", "builder", "--id", agent], "GET", f"/job-agents/{agent}"),
        (["claim", queued], "POST", f"/jobs/{queued}/claim"),
        (["claim"], "POST", f"/jobs/{later}/claim"),  # the V1 fallback: claimed by id
        (["requeue", failed], "PUT", f"/jobs/{failed}/status"),
        (["cancel", failed], "PUT", f"/jobs/{failed}/status"),
        (["complete", queued, "-s", "successful"], "PUT", f"/jobs/{queued}/status"),
    ]
    for args, method, path in commands:
        ran = cp(ctrlplane, *args, "-o", "json", agent=agent, JOBAGENTCTL_CLAIM_ID="")
        assert ran.returncode == 0, (args, ran.stderr)
        printed = json.loads(ran.stdout)
        sent = json.loads(ctrlplane.last_response(method, path))
        if isinstance(printed, list):
            sent = sent["items"]
            assert [list(p) for p in printed] == [list(s) for s in sent], args
        else:
            assert list(printed) == list(sent), args  # the same keys, in the same order
        assert printed == sent, args
        if "createdAt" in ran.stdout:  # (a claim or status update re-stamps updatedAt)
            assert ".000Z" in ran.stdout, (args, ran.stdout)
    shown = cp(ctrlplane, "jobs", "get", untouched, "-o", "json")
    assert '.000Z"' in shown.stdout and '.120Z"' in shown.stdout, shown.stdout


def test_jobs_list_status_filters_on_the_client(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    failed = ctrlplane.seed_job(agent, "failure")
    ctrlplane.seed_job(agent, "successful")
    ran = cp(ctrlplane, "jobs", "list", "--status", "failure", "-o", "json")
    assert ran.returncode == 0, ran.stderr
    assert [job["id"] for job in json.loads(ran.stdout)] == [failed]
    every = cp(ctrlplane, "jobs", "list", "--status", "failure", "--all-pages", "-o", "json")
    assert [job["id"] for job in json.loads(every.stdout)] == [failed]


def test_list_shows_the_agents_queued_jobs(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    queued = ctrlplane.seed_job(agent)
    running = ctrlplane.seed_job(agent, "in_progress")
    ran = cp(ctrlplane, "list", agent=agent)
    assert ran.returncode == 0, ran.stderr
    assert queued in ran.stdout and running not in ran.stdout
    every = cp(ctrlplane, "list", "--status", "all", "-o", "json", agent=agent)
    assert {job["id"] for job in json.loads(every.stdout)} == {queued, running}


def test_claim_without_id_uses_v1_and_says_so_once(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    oldest, newer = ctrlplane.seed_job(agent), ctrlplane.seed_job(agent)
    ran = cp(ctrlplane, "claim", "-o", "env", agent=agent)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert f"export JOBAGENTCTL_JOB_ID={oldest}" in lines
    assert "export JOBAGENTCTL_CLAIM_ID=''" in lines
    assert ran.stderr.count(NO_LEASES) == 1
    assert ctrlplane.job(oldest).status == "in_progress"
    second = cp(ctrlplane, "claim", "-o", "json", agent=agent)
    assert second.returncode == 0 and json.loads(second.stdout)["id"] == newer
    assert "claimId" not in json.loads(second.stdout)  # ctrlplane sent none: none printed
    empty = cp(ctrlplane, "claim", "--wait", "0.3s", agent=agent)
    assert (empty.returncode, empty.stdout) == (7, "")


def test_claim_waits_for_a_job_by_polling(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    seeded: list[str] = []

    def queue_on_second_look(request: Request) -> None:
        looks = [p for m, p, _ in ctrlplane.state.requests if m == "GET" and "/jobs" in p]
        if len(looks) == 2 and not seeded:
            seeded.append(ctrlplane.seed_job(agent))

    ctrlplane.before = queue_on_second_look
    ran = cp(ctrlplane, "claim", "--wait", "2m", "-o", "json", agent=agent)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["id"] == seeded[0]


def test_claim_by_id(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    job = ctrlplane.seed_job(agent)
    ran = cp(ctrlplane, "claim", job, "-o", "json", agent=agent)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["status"] == "inProgress"
    assert "granted no lease" in ran.stderr
    # What happened (claimed by id), not what a claim of the next job would do.
    assert "the job was claimed by id without a claim id or a lease" in ran.stderr
    assert "list the agent's queued jobs" not in ran.stderr
    again = cp(ctrlplane, "claim", job, agent=agent)  # 409 without code: not claimable
    assert again.returncode == 6 and "not available to claim" in again.stderr
    missing = cp(ctrlplane, "claim", ctrlplane.seed_job(None), agent=agent)
    assert missing.returncode == 5


def test_heartbeat_is_unavailable(ctrlplane: CtrlplaneStandIn) -> None:
    job = ctrlplane.seed_job(ctrlplane.add_agent(), "in_progress")
    ran = cp(ctrlplane, "heartbeat", job)
    assert ran.returncode == 1 and NO_LEASES in ran.stderr
    assert ran.stdout == ""


def test_logs_are_unavailable(ctrlplane: CtrlplaneStandIn) -> None:
    job = ctrlplane.seed_job(ctrlplane.add_agent(), "in_progress")
    for args in ([], ["--follow"]):
        ran = cp(ctrlplane, "jobs", "logs", job, *args)
        assert ran.returncode == 1, ran.stderr
        assert "the server has no log support" in ran.stderr
        assert ran.stdout == ""


def test_complete_reports_and_says_what_was_not_stored(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    job = ctrlplane.seed_job(agent, "in_progress")
    ran = cp(
        ctrlplane,
        "complete",
        job,
        "--exit-code",
        "2",
        "--external-id",
        "ci-9",
        "--link",
        "Logs=https://ci.example/9",
        JOBAGENTCTL_CLAIM_ID="",
    )
    assert ran.returncode == 0, ran.stderr
    assert ctrlplane.job(job).status == "failure" and ctrlplane.job(job).completed_at
    assert "did not store the message, external id, metadata (links)" in ran.stderr
    plain = cp(ctrlplane, "complete", ctrlplane.seed_job(agent, "in_progress"), "-s", "successful")
    assert plain.returncode == 0 and "did not store" not in plain.stderr
    no_release = ctrlplane.seed_job(agent, release=False)
    for args in (("complete", no_release, "-s", "failure"), ("jobs", "get", no_release)):
        gone = cp(ctrlplane, *args)
        assert gone.returncode == 5, gone.stderr  # ctrlplane's 404 for a job it cannot reach
        assert f"(Job not found): job {no_release}." in gone.stderr
        assert "also for a job that has no release" in gone.stderr


def test_requeue_and_cancel_accept_any_transition(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    failed = ctrlplane.seed_job(agent, "failure")
    ran = cp(ctrlplane, "requeue", failed)
    assert ran.returncode == 0, ran.stderr
    assert ctrlplane.job(failed).status == "queued"
    claimed = cp(ctrlplane, "claim", "-o", "json", agent=agent)  # and it can be claimed again
    assert json.loads(claimed.stdout)["id"] == failed
    cancelled = cp(ctrlplane, "cancel", failed, "-o", "json")
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["id"] == failed
    assert ctrlplane.job(failed).status == "cancelled"


def test_agents_commands(ctrlplane: CtrlplaneStandIn) -> None:
    registered = cp(ctrlplane, "agents", "register", "builder", "--json")
    assert registered.returncode == 0, registered.stderr
    agent = json.loads(registered.stdout)["id"]
    listed = cp(ctrlplane, "agents", "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    [shown] = json.loads(listed.stdout)
    assert shown["id"] == agent and shown["workspaceId"] == ctrlplane.workspace_id
    # The type ctrlplane's workspace-engine dispatches pull agents' jobs to.
    assert shown["type"] == "http-pull"
    got = cp(ctrlplane, "agents", "get", agent, "-o", "json")
    assert got.returncode == 0 and json.loads(got.stdout)["name"] == "builder"
    assert cp(ctrlplane, "agents", "delete", agent).returncode == 0
    assert cp(ctrlplane, "agents", "get", agent).returncode == 5


def test_v2_only_commands_fail_with_a_clear_message(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    job = ctrlplane.seed_job(agent, "in_progress")
    for args in (("jobs", "attempts", job), ("inspect-claims",), ("jobs", "enqueue")):
        ran = cp(ctrlplane, *args, agent=agent)
        assert ran.returncode == 1, (args, ran.stderr)
        assert NO_LEASES in ran.stderr, (args, ran.stderr)
        assert "Traceback" not in ran.stderr


def test_workspace_slug_from_flag_and_both_env_names(ctrlplane: CtrlplaneStandIn) -> None:
    job = ctrlplane.seed_job(ctrlplane.add_agent())
    slug = ctrlplane.workspace_slug
    for env in ({"JOBAGENTCTL_WORKSPACE": slug}, {"CTRLPLANE_WORKSPACE": slug}):
        ran = jac(ctrlplane, "jobs", "get", job, env={"JOBAGENTCTL_WORKSPACE": "", **env})
        assert ran.returncode == 0, ran.stderr
    flag = cp(ctrlplane, "--workspace", slug, "jobs", "get", job)
    assert flag.returncode == 0, flag.stderr
    unknown = cp(ctrlplane, "--workspace", "nope-nope", "jobs", "get", job)
    assert unknown.returncode == 5 and "no workspace with slug 'nope-nope'" in unknown.stderr


def test_run_claims_with_v1_runs_and_reports(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    job = ctrlplane.seed_job(agent, job_agent_config={"step": "build"})
    script = 'test -n "$JOBAGENTCTL_JOB_ID" && cat "$JOBAGENTCTL_JOB_FILE"'
    proc = run_process(ctrlplane, "run", "--", "sh", "-c", script, agent=agent)
    assert proc.returncode == 0, proc.stderr
    assert ctrlplane.job(job).status == "successful"
    # The job file hands the command ctrlplane's timestamps as it wrote them ("….389Z").
    created = raw(ctrlplane, job)["createdAt"]
    assert json.loads(proc.stdout.splitlines()[-1])["createdAt"] == created
    tsv = cp(ctrlplane, "jobs", "get", job, "-o", "tsv")
    assert f"\t{created}\t" in tsv.stdout  # so does -o tsv
    assert proc.stderr.count(NO_LEASES) == 1
    # No heartbeat was sent: the server has no route for it.
    assert not [p for m, p, _ in ctrlplane.requests() if p.endswith("/heartbeat")]


def test_run_failure_passes_the_exit_code_through(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    job = ctrlplane.seed_job(agent)
    proc = run_process(ctrlplane, "run", "--", "sh", "-c", "echo oops; exit 3", agent=agent)
    assert proc.returncode == 3, proc.stderr
    assert ctrlplane.job(job).status == "failure"
    assert "did not store the message" in proc.stderr


def test_run_job_that_is_not_queued_exits_7(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    running = ctrlplane.seed_job(agent, "in_progress")
    proc = run_process(ctrlplane, "run", "--job", running, "--", "true", agent=agent)
    assert proc.returncode == 7, proc.stderr
    assert ctrlplane.job(running).status == "in_progress"


def test_run_with_nothing_queued_exits_7_after_the_wait(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    proc = run_process(ctrlplane, "run", "--wait", "1s", "--", "true", agent=agent)
    assert proc.returncode == 7, proc.stderr


def test_run_loop_takes_queued_jobs_one_after_another(ctrlplane: CtrlplaneStandIn) -> None:
    agent = ctrlplane.add_agent()
    jobs = [ctrlplane.seed_job(agent) for _ in range(2)]
    proc = run_process(
        ctrlplane, "run", "--loop", "--max-jobs", "2", "--wait", "30s", "--", "true", agent=agent
    )
    assert proc.returncode == 0, proc.stderr
    assert [ctrlplane.job(j).status for j in jobs] == ["successful", "successful"]
    assert proc.stderr.count(NO_LEASES) == 1


def test_run_report_answered_404_is_job_gone(ctrlplane: CtrlplaneStandIn) -> None:
    """ctrlplane's status endpoint answers 404 for a job it cannot update (no release)."""
    agent = ctrlplane.add_agent()
    ctrlplane.seed_job(agent, release=False)
    proc = run_process(ctrlplane, "run", "--", "true", agent=agent)
    assert "lease lost" not in proc.stderr, proc.stderr
    assert "gone" in proc.stderr, proc.stderr
    assert proc.returncode == 5  # job_gone (docs/run.md), not 75
