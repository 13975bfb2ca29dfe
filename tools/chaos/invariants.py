"""The invariants a chaos run must keep, checked by cross-examining three witnesses:
the database (via the API), the job script's execution records, and the proxy's exchanges.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tools.chaos.proxy import Exchange

__all__ = [
    "INVARIANTS",
    "TERMINAL",
    "CheckResult",
    "Evidence",
    "Execution",
    "Overlap",
    "check",
    "parse_executions",
    "parse_overlaps",
]

TERMINAL = frozenset(
    {
        "successful",
        "failure",
        "cancelled",
        "skipped",
        "invalidJobAgent",
        "invalidIntegration",
        "externalRunNotFound",
    }
)
# Outcomes that explain why a job was claimed again.
_RERUN_OUTCOMES = frozenset({"expired", "released"})
# The proxy and the database read the same host clock, but a write is applied somewhere
# between the proxy handing it over and the answer coming back; this covers the statement's
# own duration on two busy cores (PostgreSQL's now() is the transaction start).
TIME_SLACK = 0.25
# Detection beyond lease + reap interval by more than this counts as "over the bound".
RECOVERY_TOLERANCE = 0.5

_STATUS_PATH = re.compile(r"/api/v1/workspaces/[^/]+/jobs/([0-9a-f-]{36})/status$")
_HEARTBEAT_PATH = re.compile(r"/api/v1/workspaces/[^/]+/jobs/([0-9a-f-]{36})/heartbeat$")
_CLAIM_PATH = re.compile(r"/api/v1/workspaces/[^/]+/job-agents/[^/]+/(?:jobs/[^/]+/)?claim$")
_STALE_CODES = frozenset({"CLAIM_LOST", "CLAIM_MISMATCH", "JOB_TERMINAL"})


@dataclass(frozen=True)
class Execution:
    """One run of the job script, from its ``start``/``end`` records."""

    job_id: str
    attempt: int
    claim_id: str
    pid: int
    slot: int
    started: float
    ended: float | None  # None: killed before it finished (lease lost, crash)


@dataclass(frozen=True)
class Overlap:
    """Execution ``attempt`` of ``job_id`` started while the tree of an earlier execution
    (``earlier``, its attempt number) was still alive: the job script's lock witness."""

    job_id: str
    attempt: int
    slot: int
    earlier: int


def parse_overlaps(text: str) -> list[Overlap]:
    """The witness's ``overlap JOB ATTEMPT CLAIM PID SLOT EARLIER.PID`` lines."""
    found = []
    for line in text.splitlines():
        parts = line.split()
        if parts[:1] != ["overlap"] or len(parts) != 7:
            continue
        with contextlib.suppress(ValueError):
            earlier = int(parts[6].split(".", 1)[0])
            found.append(Overlap(parts[1], int(parts[2]), int(parts[5]), earlier))
    return found


def parse_executions(text: str) -> tuple[list[Execution], list[str]]:
    """Executions from the records file, and the lines that made no sense."""
    starts: dict[tuple[str, str, int], tuple[int, int, float]] = {}
    ends: dict[tuple[str, str, int], float] = {}
    order: list[tuple[str, str, int]] = []
    bad: list[str] = []
    for line in text.splitlines():
        parts = line.split()
        if parts[:1] == ["overlap"] and len(parts) == 7:
            continue  # the witness's lines: parse_overlaps
        if len(parts) != 7 or parts[0] not in ("start", "end"):
            bad.append(line)
            continue
        what, job, attempt, claim, pid, slot, at = parts
        try:
            key = (job, claim, int(pid))
            if what == "start":
                if key in starts:
                    bad.append(line)
                starts[key] = (int(attempt), int(slot), float(at))
                order.append(key)
            else:
                ends[key] = float(at)
        except ValueError:
            bad.append(line)
    executions = []
    for key in order:
        number, slot_no, started = starts[key]
        executions.append(
            Execution(key[0], number, key[1], key[2], slot_no, started, ends.pop(key, None))
        )
    bad += [f"end without start: {key}" for key in ends]
    return executions, bad


@dataclass
class Evidence:
    """Everything a run left behind. Times are wall-clock seconds since the epoch."""

    lease_seconds: float
    reap_interval: float
    jobs: dict[str, dict[str, Any]]  # job id → the job as the API returns it
    attempts: dict[str, list[dict[str, Any]]]  # job id → its attempts (API)
    claim_rows: int  # job_claim rows left in the database
    executions: list[Execution]
    exchanges: list[Exchange]
    reports: list[dict[str, Any]] = field(default_factory=list)  # agents' --report lines
    metrics_rejections: dict[str, float] = field(default_factory=dict)  # by code, all servers
    metrics_complete: bool = True  # False when a server was killed between scrapes
    outages: list[tuple[float, float]] = field(default_factory=list)  # no reaper could run
    downs: list[tuple[float, float]] = field(default_factory=list)  # any server or database
    pauses: list[tuple[int, float, float]] = field(default_factory=list)  # (slot, STOP, CONT)
    requeues: list[tuple[str, float]] = field(default_factory=list)  # operator: (job, when)
    bad_records: list[str] = field(default_factory=list)
    overlaps: list[Overlap] | None = None  # the witness's; None: spans of records instead
    kills: list[tuple[int, float]] = field(default_factory=list)  # (slot, agent SIGKILL)
    freezes: list[tuple[int, float, float]] = field(default_factory=list)  # agent+job stopped
    # The agents ran their jobs under the watchdog: an overlap caused by an agent's SIGKILL or
    # SIGSTOP is then a violation, not a figure (docs/run.md: the tree is gone before the
    # lease ends). Only a frozen host may still overlap.
    watchdog: bool = False


@dataclass
class CheckResult:
    violations: dict[str, list[str]]
    figures: dict[str, Any]
    recovery: list[tuple[float, float, str]]  # (detection, bound, "job/attempt")

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())

    def summary(self, limit: int = 8) -> str:
        lines = []
        for name, items in self.violations.items():
            if items:
                lines.append(f"{name}: {len(items)} violation(s)")
                lines += [f"  - {item}" for item in items[:limit]]
        return "\n".join(lines) or "all invariants hold"


def _ts(value: Any) -> float | None:
    if value is None:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


OVERLAP_CAUSES = ("agent_kill", "agent_stop", "frozen host", "operator_requeue", "other")
# With the watchdog, overlaps of these causes break an invariant (see Evidence.watchdog).
WATCHDOG_CAUSES = ("agent_kill", "agent_stop")


def _overlap_causes(
    ev: Evidence, executions_by_job: dict[str, list[Execution]]
) -> list[tuple[Overlap, str]]:
    """Each witnessed overlap with its cause: what happened to the earlier execution's agent
    between its start and the later one's. In this order: stopped with its job (a frozen
    host, the one overlap the watchdog cannot prevent); SIGKILLed alone; SIGSTOPped alone; the
    job requeued by an operator (which must never overlap: the job waits for the revoked
    claim's agent to let go, or for its lease); or none of these ("other": a lease lost while
    the agent lived)."""
    found: list[tuple[Overlap, str]] = []
    for o in ev.overlaps or []:
        runs = executions_by_job.get(o.job_id, [])
        earlier = next((e for e in runs if e.attempt == o.earlier), None)
        later = next((e for e in runs if e.attempt == o.attempt), None)
        cause = "other"
        if earlier is not None and later is not None:
            a, b, slot = earlier.started, later.started, earlier.slot
            if any(s == slot and start <= b and end >= a for s, start, end in ev.freezes):
                cause = "frozen host"
            elif any(s == slot and a <= t <= b for s, t in ev.kills):
                cause = "agent_kill"
            elif any(s == slot and start <= b and end >= a for s, start, end in ev.pauses):
                cause = "agent_stop"
            elif any(j == o.job_id and a <= t <= b for j, t in ev.requeues):
                cause = "operator_requeue"
        found.append((o, cause))
    return found


def _overlap(a: float, b: float, intervals: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(b, hi) - max(a, lo)) for lo, hi in intervals)


def _classify(ex: Exchange) -> tuple[str, str | None]:
    """``(kind, job id)``: kind ∈ heartbeat, status, claim, other."""
    path = ex.path.split("?", 1)[0]
    if ex.method == "POST" and (m := _HEARTBEAT_PATH.search(path)):
        return "heartbeat", m.group(1)
    if ex.method == "PUT" and (m := _STATUS_PATH.search(path)):
        return "status", m.group(1)
    if ex.method == "POST" and _CLAIM_PATH.search(path):
        return "claim", None
    return "other", None


@dataclass
class _Index:
    """The three witnesses indexed once, for every invariant and figure to read."""

    attempts_by_claim: dict[tuple[str, str], dict[str, Any]]
    executions_by_job: dict[str, list[Execution]]
    # The proxy's view: accepted successful reports, renewals and stale writes refused.
    accepted_success: dict[str, set[str]]
    first_success_at: dict[tuple[str, str], float]
    renewals: dict[tuple[str, str], float]
    rejected: Counter[str]
    jobs: list[_Job]
    caused: list[tuple[Overlap, str]]  # each witnessed overlap with its cause


@dataclass
class _Job:
    """One job as the database tells it, next to its executions and accepted reports."""

    job_id: str
    status: Any
    rows: list[dict[str, Any]]  # its attempts, by number
    completed: list[dict[str, Any]]
    successes: set[str]  # claims whose successful report the proxy saw accepted
    rerun_by_operator: set[str]  # completed attempts an operator's requeue followed
    expected: int  # accepted successes expected: one, plus one per such requeue
    runs: list[Execution]
    seen: Counter[str]  # executions per claim


def _proxy_exchanges(ev: Evidence) -> Iterator[tuple[str, str, Exchange]]:
    """``(kind, job id, exchange)`` of every answered heartbeat and status write."""
    for ex in ev.exchanges:
        kind, job_id = _classify(ex)
        if kind in ("heartbeat", "status") and job_id is not None and ex.status is not None:
            yield kind, job_id, ex


def _index(ev: Evidence) -> _Index:
    attempts_by_claim: dict[tuple[str, str], dict[str, Any]] = {}
    for owner_id, owner_rows in ev.attempts.items():
        for owner_row in owner_rows:
            if owner_row.get("claimId"):
                attempts_by_claim[(owner_id, str(owner_row["claimId"]))] = owner_row
    executions_by_job: dict[str, list[Execution]] = defaultdict(list)
    for exe in ev.executions:
        executions_by_job[exe.job_id].append(exe)
    accepted_success, first_success_at, renewals, rejected = _proxy_view(ev, attempts_by_claim)
    return _Index(
        attempts_by_claim=attempts_by_claim,
        executions_by_job=executions_by_job,
        accepted_success=accepted_success,
        first_success_at=first_success_at,
        renewals=renewals,
        rejected=rejected,
        jobs=[
            _job(ev, job_id, job, accepted_success, executions_by_job)
            for job_id, job in ev.jobs.items()
        ],
        caused=_overlap_causes(ev, executions_by_job),
    )


def _proxy_view(
    ev: Evidence, attempts_by_claim: dict[tuple[str, str], dict[str, Any]]
) -> tuple[
    dict[str, set[str]], dict[tuple[str, str], float], dict[tuple[str, str], float], Counter[str]
]:
    """What the proxy saw: the claims whose successful report was accepted (and when first),
    each claim's last renewal (its grant or a heartbeat), and the stale writes refused."""
    accepted_success: dict[str, set[str]] = defaultdict(set)
    first_success_at: dict[tuple[str, str], float] = {}
    renewals: dict[tuple[str, str], float] = {}
    rejected: Counter[str] = Counter()
    for ex in ev.exchanges:
        kind, _ = _classify(ex)
        if kind == "claim" and ex.status == 200 and ex.response:
            granted = ex.response.get("claimId")
            if granted and ex.t_fwd is not None:
                key = (str(ex.response.get("id")), str(granted))
                renewals[key] = max(renewals.get(key, 0.0), ex.t_fwd)
    for kind, job_id, ex in _proxy_exchanges(ev):
        assert ex.status is not None
        if ex.status == 409 and ex.error_code in _STALE_CODES:
            rejected[kind] += 1
            continue
        claim_id = ex.claim_id
        if not 200 <= ex.status < 300 or claim_id is None:
            continue
        if (job_id, claim_id) not in attempts_by_claim:
            continue
        assert ex.t_fwd is not None
        if kind == "status" and (ex.request or {}).get("status") == "successful":
            accepted_success[job_id].add(claim_id)
            first_success_at.setdefault((job_id, claim_id), ex.t_fwd)
        if kind == "heartbeat":
            renewals[(job_id, claim_id)] = max(renewals.get((job_id, claim_id), 0.0), ex.t_fwd)
    return accepted_success, first_success_at, renewals, rejected


def _job(
    ev: Evidence,
    job_id: str,
    job: dict[str, Any],
    accepted_success: dict[str, set[str]],
    executions_by_job: dict[str, list[Execution]],
) -> _Job:
    rows = sorted(ev.attempts.get(job_id, []), key=lambda r: int(r["attempt"]))
    # An operator's requeue that lands just after the job completed (the harness picks a
    # running job, which may finish before the request arrives) runs it again by request:
    # each completed attempt an operator requeue followed is one more expected success.
    rerun_by_operator = {
        str(r["attempt"])
        for r in rows[:-1]
        if r.get("outcome") == "completed"
        and (done := _ts(r.get("endedAt"))) is not None
        and any(j == job_id and at >= done - TIME_SLACK - 5.0 for j, at in ev.requeues)
    }
    runs = executions_by_job.get(job_id, [])
    return _Job(
        job_id=job_id,
        status=job.get("status"),
        rows=rows,
        completed=[r for r in rows if r.get("outcome") == "completed"],
        successes=accepted_success.get(job_id, set()),
        rerun_by_operator=rerun_by_operator,
        expected=1 + len(rerun_by_operator),
        runs=runs,
        seen=Counter(exe.claim_id for exe in runs),
    )


# --- the invariants, one function each: the messages of what broke it ------------------------


def _every_job_terminal(ev: Evidence, ix: _Index) -> list[str]:
    return [f"job {j.job_id} is {j.status}" for j in ix.jobs if j.status not in TERMINAL]


def _one_accepted_success(ev: Evidence, ix: _Index) -> list[str]:
    out = []
    for j in ix.jobs:
        if (
            j.status != "successful"
            or len(j.successes) != j.expected
            or len(j.completed) != j.expected
        ):
            out.append(
                f"job {j.job_id}: status {j.status}, {len(j.successes)} accepted successful "
                f"report(s) (claims {sorted(j.successes)}), {len(j.completed)} completed "
                "attempt(s)"
            )
        elif str(j.completed[-1].get("claimId")) not in j.successes:
            out.append(
                f"job {j.job_id}: completed by claim {j.completed[0].get('claimId')}, but the "
                f"accepted report carried {sorted(j.successes)}"
            )
        if j.completed:
            out += _success_after_the_work(j, ix)
    for line in ev.reports:
        if line.get("status") == "successful" and line.get("reported"):
            job_id, claim_id = str(line.get("jobId")), str(line.get("claimId"))
            if claim_id not in ix.accepted_success.get(job_id, set()):
                out.append(
                    f"agent says job {job_id} was reported successful with claim {claim_id}; "
                    "the proxy saw no such accepted report"
                )
    return out


def _success_after_the_work(j: _Job, ix: _Index) -> list[str]:
    """The accepted success came from an execution that finished, and after it finished."""
    claim_id = str(j.completed[0].get("claimId"))
    finished = [exe for exe in j.runs if exe.claim_id == claim_id and exe.ended]
    if not finished:
        return [f"job {j.job_id}: successful by claim {claim_id}, whose execution never finished"]
    reported_at = ix.first_success_at.get((j.job_id, claim_id))
    ended_at = finished[0].ended
    if reported_at is not None and ended_at is not None and ended_at > reported_at + TIME_SLACK:
        return [
            f"job {j.job_id}: success reported {ended_at - reported_at:.2f}s "
            "before its execution ended"
        ]
    return []


def _stale_writes_rejected(ev: Evidence, ix: _Index) -> list[str]:
    """A write with a claim that is not current is refused; one with the current claim is
    not; none is accepted after its attempt ended (but a repeated terminal status)."""
    out = []
    for kind, job_id, ex in _proxy_exchanges(ev):
        assert ex.status is not None
        claim_id = ex.claim_id
        if ex.status == 409 and ex.error_code in _STALE_CODES:
            holder = ix.attempts_by_claim.get((job_id, claim_id)) if claim_id else None
            ended = _ts(holder.get("endedAt")) if holder else None
            if (
                holder is not None
                and ex.t_resp is not None
                and (ended is None or ex.t_resp < ended - TIME_SLACK)
            ):
                out.append(
                    f"{kind} for job {job_id} with its current claim {claim_id} (attempt "
                    f"{holder['attempt']}) was refused {ex.error_code} while the attempt was open"
                )
            continue
        if not 200 <= ex.status < 300:
            continue
        if claim_id is None:
            out.append(
                f"{kind} for job {job_id} was accepted without a claimId (agents always send one)"
            )
            continue
        row = ix.attempts_by_claim.get((job_id, claim_id))
        if row is None:
            out.append(
                f"{kind} for job {job_id} accepted with claim {claim_id}, which no attempt has"
            )
            continue
        ended = _ts(row.get("endedAt"))
        assert ex.t_fwd is not None
        idempotent_repeat = (
            kind == "status"
            and row.get("outcome") == "completed"
            and ev.jobs.get(job_id, {}).get("status") == (ex.request or {}).get("status")
        )
        if ended is not None and ex.t_fwd > ended + TIME_SLACK and not idempotent_repeat:
            out.append(
                f"stale {kind} for job {job_id} accepted {ex.t_fwd - ended:.2f}s after its "
                f"attempt {row['attempt']} ended ({row.get('outcome')}); claim {claim_id}"
            )
    return out


def _none_left_in_progress(ev: Evidence, ix: _Index) -> list[str]:
    out = [f"{ev.claim_rows} job_claim row(s) left behind"] if ev.claim_rows else []
    for j in ix.jobs:
        if j.status == "inProgress":
            out.append(f"job {j.job_id} is still inProgress")
        open_rows = [r for r in j.rows if r.get("outcome") is None]
        if open_rows:
            out.append(
                f"job {j.job_id}: attempt(s) {[r['attempt'] for r in open_rows]} never closed"
            )
    return out


def _attempts_explain_reruns(ev: Evidence, ix: _Index) -> list[str]:
    """Attempts 1..n, each but the last ended expired or released (or completed before an
    operator's requeue), the last completed; each execution belongs to one attempt, once."""
    out = [
        f"an execution of unknown job {exe_job}"
        for exe_job in ix.executions_by_job
        if exe_job not in ev.jobs
    ]
    for j in ix.jobs:
        numbers = [int(r["attempt"]) for r in j.rows]
        if numbers != list(range(1, len(j.rows) + 1)):
            out.append(f"job {j.job_id}: attempts {numbers}")
        out += [
            f"job {j.job_id}: attempt {r['attempt']} ended {r.get('outcome')} yet the "
            "job was claimed again"
            for r in j.rows[:-1]
            if r.get("outcome") not in _RERUN_OUTCOMES
            and str(r["attempt"]) not in j.rerun_by_operator
        ]
        out += [
            f"job {j.job_id}: claim {claim_id} was executed {count} times"
            for claim_id, count in j.seen.items()
            if count > 1
        ]
        by_claim = {str(r.get("claimId")): r for r in j.rows}
        for exe in j.runs:
            owner = by_claim.get(exe.claim_id)
            if owner is None or int(owner["attempt"]) != exe.attempt:
                out.append(
                    f"job {j.job_id}: an execution (attempt {exe.attempt}, claim "
                    f"{exe.claim_id}) that no attempt row explains"
                )
        if len(j.runs) > len(j.rows):
            out.append(f"job {j.job_id}: {len(j.runs)} executions but {len(j.rows)} attempts")
    return out


def _no_overlap_after_kill_or_stop(ev: Evidence, ix: _Index) -> list[str]:
    if not ev.watchdog:
        return []
    return [
        f"job {o.job_id}: attempt {o.attempt} (agent {o.slot}) started while attempt "
        f"{o.earlier}'s tree still lived, after its agent's {cause}: the watchdog should "
        "have stopped it before the lease ended"
        for o, cause in ix.caused
        if cause in WATCHDOG_CAUSES
    ]


def _no_overlap_after_requeue(ev: Evidence, ix: _Index) -> list[str]:
    return [
        f"job {o.job_id}: attempt {o.attempt} (agent {o.slot}) started while attempt "
        f"{o.earlier}'s tree still lived, after an operator requeued it: the job should have "
        "waited for the revoked claim's agent to let go"
        for o, cause in ix.caused
        if cause == "operator_requeue"
    ]


def _records_well_formed(ev: Evidence, ix: _Index) -> list[str]:
    return list(ev.bad_records)


def _internal_errors(ev: Evidence) -> list[Exchange]:
    """The answers of 500: a database or server fault is the service being unavailable (503
    with Retry-After, or the proxy's own 502/504), so a 500 is a defect whatever the fault."""
    return [ex for ex in ev.exchanges if ex.status == 500]


def _no_answer_of_500(ev: Evidence, ix: _Index) -> list[str]:
    return [
        f"{ex.method} {ex.path} answered 500 ({(ex.response or {}).get('message', '')!s:.120})"
        for ex in _internal_errors(ev)
    ]


# Each invariant by the name a run reports, in the order of the summary. A new one is a
# function above and a row here.
INVARIANTS: dict[str, Callable[[Evidence, _Index], list[str]]] = {
    "every job terminal": _every_job_terminal,
    "exactly one accepted successful report": _one_accepted_success,
    "stale writes rejected": _stale_writes_rejected,
    "no job left inProgress": _none_left_in_progress,
    "attempts explain every re-run": _attempts_explain_reruns,
    "every lease loss explained by a fault": lambda ev, ix: _unexplained_losses(ev),
    "no overlap after an agent kill or stop (watchdog)": _no_overlap_after_kill_or_stop,
    "no overlap after an operator's requeue": _no_overlap_after_requeue,
    "records well formed": _records_well_formed,
    "no answer of 500 (a fault is a 503, never an internal error)": _no_answer_of_500,
}


def check(ev: Evidence) -> CheckResult:
    """Every invariant over ``ev``, and the run's figures."""
    ix = _index(ev)
    violations = {name: invariant(ev, ix) for name, invariant in INVARIANTS.items()}
    recovery = _recovery(ev, ix)
    return CheckResult(violations=violations, figures=_figures(ev, ix, recovery), recovery=recovery)


def _recovery(ev: Evidence, ix: _Index) -> list[tuple[float, float, str]]:
    """How long after its last renewal each expired claim was reaped, and the bound then."""
    bound = ev.lease_seconds + ev.reap_interval
    recovery: list[tuple[float, float, str]] = []
    for j in ix.jobs:
        for r in j.rows:
            if r.get("outcome") != "expired":
                continue
            claim_id = str(r.get("claimId"))
            ended = _ts(r.get("endedAt"))
            start = max(ix.renewals.get((j.job_id, claim_id), 0.0), _ts(r.get("claimedAt")) or 0.0)
            if ended is None:
                continue
            detection = ended - start
            allowed = bound + _overlap(start, ended, ev.outages)
            recovery.append((detection, allowed, f"{j.job_id}/{r['attempt']}"))
    return recovery


def _figures(ev: Evidence, ix: _Index, recovery: list[tuple[float, float, str]]) -> dict[str, Any]:
    bound = ev.lease_seconds + ev.reap_interval
    # The script always exits 0: any other end is a job lost to a fault.
    lost = sum(1 for j in ix.jobs if j.status != "successful")
    double = sum(
        1 for j in ix.jobs if len(j.successes) > j.expected or len(j.completed) > j.expected
    )
    overlapping = 0
    for runs in ix.executions_by_job.values():
        spans = sorted((e.started, e.ended or float("inf")) for e in runs)
        overlapping += sum(1 for a, b in itertools.pairwise(spans) if b[0] < a[1])
    if ev.overlaps is not None:
        overlapping = len(ix.caused)
    causes = Counter(cause for _, cause in ix.caused)
    worst = max(recovery, default=None)
    clean = max((r for r in recovery if r[1] == bound), default=None)
    over = [r for r in recovery if r[0] > r[1] + RECOVERY_TOLERANCE]
    outcomes = Counter(r.get("outcome") for j in ix.jobs for r in j.rows)
    return {
        "jobs": len(ev.jobs),
        "executions": len(ev.executions),
        "re-runs": sum(max(0, len(j.runs) - 1) for j in ix.jobs),
        "overlapping executions (zombies)": overlapping,
        **{f"overlaps: {cause}": causes.get(cause, 0) for cause in OVERLAP_CAUSES},
        "attempts": sum(len(rows) for rows in ev.attempts.values()),
        "attempts expired": outcomes["expired"],
        "attempts released": outcomes["released"],
        "claims never executed": sum(
            1 for j in ix.jobs for r in j.rows if str(r.get("claimId")) not in j.seen
        ),
        "stale heartbeats rejected (proxy)": ix.rejected["heartbeat"],
        "stale status writes rejected (proxy)": ix.rejected["status"],
        "lease-lost rejections (server metrics)": (
            ("" if ev.metrics_complete else "≥ ") + f"{sum(ev.metrics_rejections.values()):.0f}"
        ),
        "lease lost (agent reports)": sum(
            1 for line in ev.reports if line.get("reason") == "lease_lost"
        ),
        "successes (agent reports)": sum(
            1 for line in ev.reports if line.get("status") == "successful" and line.get("reported")
        ),
        "lost jobs": lost,
        "double completions": double,
        "answers of 500": len(_internal_errors(ev)),
        "worst detection (s)": round(worst[0], 2) if worst else None,
        "worst detection outside outages (s)": round(clean[0], 2) if clean else None,
        "detection bound lease+reap (s)": round(bound, 2),
        "detections over bound (outside outages)": len(over),
    }


def _unexplained_losses(ev: Evidence) -> list[str]:
    """Agents that gave up a lease the server still held, with no fault anywhere near.

    A loss is explained by a proxy fault on the agent's requests, a slow or failed answer, an
    outage of any server or the database, the agent being stopped, an operator's requeue of
    the job, or the agent itself not
    getting to send a heartbeat in time (a starved process: not a defect of the lease logic).
    What is left is the agent's own bookkeeping throwing away a healthy lease.
    """
    out: list[str] = []
    claims: dict[tuple[str, str], Exchange] = {}
    by_slot: dict[int, list[Exchange]] = defaultdict(list)
    for ex in ev.exchanges:
        by_slot[ex.slot].append(ex)
        kind, _ = _classify(ex)
        if kind == "claim" and ex.status == 200 and ex.response and ex.response.get("claimId"):
            claims[(str(ex.response.get("id")), str(ex.response["claimId"]))] = ex
    for line in ev.reports:
        if line.get("reason") != "lease_lost":
            continue
        slot = int(line.get("_slot", -1))
        job_id, claim_id = str(line.get("jobId")), str(line.get("claimId"))
        claim = claims.get((job_id, claim_id))
        finished = _ts(line.get("finishedAt")) or 0.0
        if claim is None or claim.t_resp is None:
            continue  # the claim's answer never came through the proxy: a fault by itself
        if _loss_explained(ev, slot, job_id, claim_id, claim, finished, by_slot):
            continue
        out.append(
            f"agent {slot} gave up job {job_id} (claim {claim_id}) "
            f"{finished - claim.t_resp:.2f}s after the claim answered, with "
            f"{line.get('heartbeats')} heartbeat(s) and no fault in sight; its claim request "
            f"had been waiting {claim.t_resp - claim.t_recv:.2f}s"
        )
    return out


def _loss_explained(
    ev: Evidence,
    slot: int,
    job_id: str,
    claim_id: str,
    claim: Exchange,
    finished: float,
    by_slot: dict[int, list[Exchange]],
) -> bool:
    """Whether a fault, an outage, a pause, a requeue or starvation explains the loss."""
    assert claim.t_resp is not None
    begin = claim.t_recv
    if claim.fault:
        return True
    # An outage while the claim was still waiting (a long-poll) does not touch the lease:
    # it starts when the server answered; only an outage since then explains a loss.
    since = claim.t_resp - ev.lease_seconds
    if any(lo < finished and hi > since for lo, hi in ev.downs):
        return True
    if any(s == slot and lo < finished and hi > begin for s, lo, hi in ev.pauses):
        return True
    if any(j == job_id and begin < at <= finished for j, at in ev.requeues):
        return True  # an operator took the job back
    mine = [e for e in by_slot.get(slot, []) if begin < e.t_recv <= finished]
    if any(e.fault for e in mine):
        return True
    if any(
        e.status is None or e.status >= 500 or (e.t_resp or finished) - e.t_recv > 0.5 for e in mine
    ):
        return True
    # Starvation: the job was in hand, yet no heartbeat left the agent within a lease.
    sends = [claim.t_resp] + [
        e.t_recv for e in mine if _classify(e)[0] == "heartbeat" and e.claim_id == claim_id
    ]
    gaps = [b - a for a, b in itertools.pairwise([*sorted(sends), finished])]
    return max(gaps) >= 0.8 * ev.lease_seconds and finished - claim.t_resp > 1.0
