"""`run --loop` against the project's server: each report claims the next job (claimNext,
issue 14 §3), so a busy agent spends one request per job, not two."""

from __future__ import annotations

import re

from .runs import Harness


def test_loop_reports_and_claims_the_next_job_in_one_request(harness: Harness) -> None:
    jobs = [harness.enqueue() for _ in range(4)]
    run = harness.start(["--loop", "--max-jobs", "3", "--debug"], ["sh", "-c", "exit 0"])
    assert run.wait() == 0, run.stderr()
    assert [r["jobId"] for r in run.report()] == jobs[:3]
    assert [harness.job(j)["status"] for j in jobs] == ["successful"] * 3 + ["queued"]
    for job in jobs[:3]:
        assert [a["outcome"] for a in harness.attempts(job)] == ["completed"]
    requests = re.findall(r"^\[http\] > (POST|PUT) (\S+)$", run.stderr(), flags=re.MULTILINE)
    claims = [url for method, url in requests if url.endswith("/claim")]
    reports = [url for method, url in requests if url.endswith("/status")]
    # One claim-next, then three reports of which the first two claimed the next job; the
    # last (--max-jobs reached) did not, so the fourth job stays queued.
    assert (len(claims), len(reports)) == (1, 3), requests
