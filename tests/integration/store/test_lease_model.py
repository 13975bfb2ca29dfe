"""A property model of the lease lifecycle: hypothesis drives the real store on SQLite
and PostgreSQL through random sequences of claims, heartbeats, expiries, reaps and status writes.

Every answer is checked against a small model of what each job should be (status, claim,
attempts), and after every step the tables themselves are checked against the model and the
invariants: at most one claim row per job; a claim row ⇔ the job is ``inProgress`` under a
lease; attempt numbers 1..n with only the last one open; a refused or repeated write changes no
row at all; each expiry is reaped exactly once (``maxReclaims`` included); a claim an operator
ended is kept as revoked, and its job not claimable, until its holder writes with it (refused, or
answered as a repeat: whatever the attempt's outcome), the operator forces it, or it expires and is
reaped.

Leases are long (≥ 300 s) so none lapses by itself; expiry is the ``Raw.expire`` UPDATE.
``JOBAGENTCTL_PROPERTY_EXAMPLES=500`` runs longer; ``JOBAGENTCTL_PROPERTY_SHRINK=1`` shrinks a
failure to its shortest steps (slow: minutes against a database, hence off by default).
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID, uuid4

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from jobagentctl.errors import (
    ClaimLost,
    ClaimMismatch,
    JobAgentError,
    NotClaimable,
    NotFound,
    ValidationError,
)
from jobagentctl.models import TERMINAL_STATUSES, JobStatus
from jobagentctl.server.store import Store, open_store
from tests.integration.store.dialect import Raw

T = TypeVar("T")

EXAMPLES = int(os.environ.get("JOBAGENTCTL_PROPERTY_EXAMPLES", "50"))
STEPS = 40
PHASES = (
    tuple(Phase)
    if os.environ.get("JOBAGENTCTL_PROPERTY_SHRINK") == "1"
    else (Phase.explicit, Phase.reuse, Phase.generate)
)
LEASES = (300, 900, 3600)  # never lapse by themselves within an example
WRITE_STATUSES = (
    JobStatus.SUCCESSFUL,
    JobStatus.FAILURE,
    JobStatus.CANCELLED,
    JobStatus.SKIPPED,
    JobStatus.QUEUED,  # release (with the claim id) or operator requeue (without)
)
# Which claim id a write carries: the job's current one, none, one of its earlier attempts'
# (stale), or one that never existed.
CLAIM_CHOICES = ("current", "none", "stale", "random")
INDEX = st.integers(min_value=0, max_value=63)
# Who writes: the job's own agent, an operator (workspace key), or another agent's key.
SCOPES = ("own", "operator", "other")
# Most picks go to a job in the state a rule is about; the rest to any job.
FOCUS = st.sampled_from((True, True, True, False))


@dataclass
class Attempt:
    number: int
    claim_id: UUID | None
    outcome: str | None = None


@dataclass
class ModelJob:
    id: UUID
    agent: UUID
    created_at: datetime
    seq: int  # creation order
    status: JobStatus = JobStatus.QUEUED
    message: str | None = None
    attempts: list[Attempt] = field(default_factory=list)
    lease: int | None = None  # the claim row's lease_seconds; None = no claim row
    expired: bool = False
    expiries: int = 0
    revoked: UUID | None = None  # the claim id of a revoked claim still held
    revoked_expired: bool = False

    @property
    def claim_id(self) -> UUID | None:
        """The claim row's claim id (None when there is no claim row)."""
        return self.attempts[-1].claim_id if self.lease is not None else None

    def stale_claim_ids(self) -> list[UUID]:
        current = self.claim_id
        return [a.claim_id for a in self.attempts if a.claim_id and a.claim_id != current]

    def end_attempt(self, outcome: str) -> None:
        if self.status == JobStatus.IN_PROGRESS:
            self.attempts[-1].outcome = outcome
        self.lease = None
        self.expired = False


def queued(job: ModelJob) -> bool:
    return job.status == JobStatus.QUEUED


def leased(job: ModelJob) -> bool:
    return job.lease is not None


def has_stale_claims(job: ModelJob) -> bool:
    return bool(job.stale_claim_ids())


def live(job: ModelJob) -> bool:
    return job.lease is not None and not job.expired


def _outcome_for(status: JobStatus) -> str:
    if status == JobStatus.CANCELLED:
        return "cancelled"
    return "completed" if status in TERMINAL_STATUSES else "released"


@pytest.fixture
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as loop_runner:
        yield loop_runner


# Slow: hundreds of random programs per database (108 s on PostgreSQL with the machine busy);
# make test-fast leaves it out, as it did when the model lived in tests/property.
@pytest.mark.slow
def test_lease_lifecycle_matches_the_model(database_url: str, runner: asyncio.Runner) -> None:
    store = open_store(database_url)
    runner.run(store.open())
    raw: Raw | None = None
    try:
        runner.run(store.migrate())
        ws = runner.run(store.entities.create_workspace("property"))
        first, second = (
            runner.run(store.entities.upsert_agent(ws, uuid4(), name, "shell", {}, None)).id
            for name in ("a", "b")
        )
        agents = (first, second)
        raw = Raw(database_url)
        seen: Counter[str] = Counter()
        machine = _machine(store, raw, runner, ws, agents, seen)
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=EXAMPLES,
                stateful_step_count=STEPS,
                deadline=None,
                # The same examples every run: the floors below hold for them, where random
                # ones now and then revoked 2 claims in a run and let none of them go (a CI
                # failure that said nothing about the store). JOBAGENTCTL_PROPERTY_EXAMPLES
                # raises the count for a longer search.
                derandomize=True,
                # Shrinking replays hundreds of examples against the database: minutes, past
                # the per-test timeout. The unshrunk failing steps are printed all the same.
                phases=PHASES,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
        # `pytest -s` shows what the run exercised.
        print(f"{store.dialect}: " + ", ".join(f"{k} {v}" for k, v in sorted(seen.items())))
        # Weak floors, so the run cannot pass without ever reaching the lease paths (each is
        # met dozens of times per run in practice; see -s).
        reached = {
            "claims": seen["claimed"],
            "agent writes on claimed jobs": sum(
                v for k, v in seen.items() if k.startswith("applied: inProgress")
            ),
            "reaped expiries": seen["reaped: requeued"] + seen["reaped: failed"],
            "fenced-off writes": seen["refused: ClaimMismatch"] + seen["refused: ClaimLost"],
            "revoked claims let go": seen["revoked claim let go"],
        }
        assert all(reached.values()), reached
    finally:
        if raw is not None:
            raw.close()
        runner.run(store.close())


def _machine(  # noqa: C901 - the rules of one state machine, around this test's store
    store: Store,
    raw: Raw,
    runner: asyncio.Runner,
    ws: UUID,
    agents: tuple[UUID, UUID],
    seen: Counter[str],
) -> type[RuleBasedStateMachine]:
    class LeaseLifecycle(RuleBasedStateMachine):
        # Outcomes met across all examples: the test asserts the run reached the interesting
        # paths, so it cannot pass vacuously.
        seen: Counter[str]

        def __init__(self) -> None:
            super().__init__()
            self.jobs: dict[UUID, ModelJob] = {}
            self.max_reclaims = 0

        # --- plumbing --------------------------------------------------------------------
        def run(self, coro: Coroutine[Any, Any, T]) -> T:
            return runner.run(coro)

        def pick(self, data: st.DataObject, prefer: Callable[[ModelJob], bool]) -> ModelJob:
            """A job, mostly one that ``prefer`` likes (most rules only get interesting
            then). Always the same two draws, interpreted against the jobs in creation order:
            the draws must not depend on what the random ids did to the state, or hypothesis
            cannot replay and shrink."""
            focus = data.draw(FOCUS, label="prefer")
            index = data.draw(INDEX, label="job")
            candidates = list(self.jobs.values())
            preferred = [j for j in candidates if prefer(j)]
            if focus and preferred:
                candidates = preferred
            return candidates[index % len(candidates)]

        def other_agent(self, agent: UUID) -> UUID:
            return agents[1] if agent == agents[0] else agents[0]

        def claim_id_for(self, data: st.DataObject, job: ModelJob, choice: str) -> UUID | None:
            index = data.draw(INDEX, label="stale claim id")
            stale = job.stale_claim_ids()
            if choice == "stale" and stale:
                return stale[index % len(stale)]
            if choice == "current" and job.claim_id is not None:
                return job.claim_id
            if choice == "none":
                return None
            if choice == "current" and job.attempts and job.attempts[-1].claim_id:
                return job.attempts[-1].claim_id  # the last claim, gone now: stale as well
            return uuid4()

        def refused(
            self,
            error: type[JobAgentError],
            coro: Coroutine[Any, Any, object],
            details: dict[str, Any] | None = None,
        ) -> None:
            """The call raises exactly ``error`` (with ``details``) and changes no row."""
            self.seen[f"refused: {error.__name__}"] += 1
            before = raw.snapshot()
            with pytest.raises(JobAgentError) as info:
                self.run(coro)
            assert type(info.value) is error, (info.value, error)
            if details is not None:
                assert info.value.details == details
            assert raw.snapshot() == before, f"a refused {error.__name__} changed rows"

        # --- rules -----------------------------------------------------------------------
        @initialize(
            max_reclaims=st.sampled_from([1, 2, 0]),
            queued=st.integers(1, 4),
            claims=st.lists(st.sampled_from((*LEASES, None)), max_size=3),
        )
        def fresh_queue(self, max_reclaims: int, queued: int, claims: list[int | None]) -> None:
            """A queue of a few jobs, some already claimed: every example starts where the
            interesting rules have something to act on."""
            raw.clear_jobs()
            self.max_reclaims = max_reclaims
            self.seen["examples"] += 1
            for n in range(queued):
                self.create_job(agents[n % 2])
            for n, lease in enumerate(claims):
                self.claim_next(agents[n % 2], lease)

        @rule(agent=st.sampled_from(agents))
        def create_job(self, agent: UUID) -> None:
            job = self.run(store.entities.create_job(ws, agent, None, None, None))
            assert job.status == JobStatus.QUEUED
            self.jobs[job.id] = ModelJob(job.id, agent, job.created_at, len(self.jobs))

        @precondition(lambda self: self.jobs)
        @rule(data=st.data(), lease=st.sampled_from((*LEASES, None)), own=st.booleans())
        def claim_by_id(self, data: st.DataObject, lease: int | None, own: bool) -> None:
            job = self.pick(data, queued)
            agent = job.agent if own else self.other_agent(job.agent)
            call = store.claim_job(ws, agent, job.id, lease)
            if not own:
                self.refused(NotFound, call)
            elif job.status != JobStatus.QUEUED:
                self.refused(NotClaimable, call, {"jobStatus": job.status.value})
            elif job.revoked is not None:
                self.refused(NotClaimable, call, {"jobStatus": "queued", "claimHeld": True})
            else:
                self.claimed(job, self.run(call), lease)

        @rule(agent=st.sampled_from(agents), lease=st.sampled_from((*LEASES, None)))
        def claim_next(self, agent: UUID, lease: int | None) -> None:
            queued = [
                j
                for j in self.jobs.values()
                if j.agent == agent and j.status == JobStatus.QUEUED and j.revoked is None
            ]
            if not queued:
                before = raw.snapshot()
                assert self.run(store.claim_next(ws, agent, lease)) is None
                assert raw.snapshot() == before
                return
            # Jobs created within one clock tick are taken in creation order (SQLite orders
            # ties by rowid; PostgreSQL's microsecond clock makes ties unlikely).
            oldest = min(queued, key=lambda j: (j.created_at, j.seq))
            got = self.run(store.claim_next(ws, agent, lease))
            assert got is not None and got.id == oldest.id, "claim-next must take the oldest"
            self.claimed(oldest, got, lease)

        def claimed(self, job: ModelJob, got: Any, lease: int | None) -> None:
            self.seen["claimed" + (" again" if job.attempts else "")] += 1
            number = len(job.attempts) + 1
            assert got.status == JobStatus.IN_PROGRESS and got.attempt == number
            assert got.lease_seconds == lease
            assert (got.claim_id is None) == (lease is None)
            if got.claim_id is not None:  # a fresh fencing token, never reused
                assert got.claim_id not in {a.claim_id for a in job.attempts}
            job.attempts.append(Attempt(number, got.claim_id))
            job.status = JobStatus.IN_PROGRESS
            job.lease = lease
            job.expired = False

        @precondition(lambda self: self.jobs)
        @rule(
            data=st.data(),
            with_claim_id=st.booleans(),
            lease=st.sampled_from((None, *LEASES)),
            operator=st.booleans(),
        )
        def heartbeat(
            self, data: st.DataObject, with_claim_id: bool, lease: int | None, operator: bool
        ) -> None:
            """The agent (or an operator) keeps its claim alive."""
            job = self.pick(data, leased)
            claim_id = self.claim_id_for(data, job, "current" if with_claim_id else "none")
            self.beat(job, claim_id, lease, "operator" if operator else "own")

        @precondition(lambda self: self.jobs)
        @rule(
            data=st.data(),
            choice=st.sampled_from(("stale", "random")),
            scope=st.sampled_from(SCOPES),
        )
        def fenced_heartbeat(self, data: st.DataObject, choice: str, scope: str) -> None:
            """A heartbeat with a claim id from an earlier attempt, or one that never was."""
            job = self.pick(data, leased)
            self.beat(job, self.claim_id_for(data, job, choice), None, scope)

        def beat(self, job: ModelJob, claim_id: UUID | None, lease: int | None, scope: str) -> None:
            call = store.heartbeat(ws, job.id, claim_id, lease, self.agent_scope(job, scope))
            if scope == "other":
                self.refused(NotFound, call)
            elif job.lease is None:
                self.refused(ClaimLost, call, {"jobStatus": job.status.value})
            elif claim_id is not None and claim_id != job.claim_id:
                details = {"jobStatus": "inProgress", "attempt": len(job.attempts)}
                self.refused(ClaimMismatch, call, details)
            else:
                beat = self.run(call)
                assert (beat.job_id, beat.claim_id, beat.attempt) == (
                    job.id,
                    job.claim_id,
                    len(job.attempts),
                )
                job.lease = lease or job.lease
                assert beat.lease_seconds == job.lease
                self.seen["heartbeat revived" if job.expired else "heartbeat"] += 1
                job.expired = False  # a heartbeat before the sweep revives the claim

        @precondition(lambda self: self.jobs)
        @rule(data=st.data())
        def expire(self, data: st.DataObject) -> None:
            """The agent stops heartbeating: a live claim lapses (any job when none is live:
            a job without a claim row has nothing to expire)."""
            job = self.pick(data, live)
            assert raw.expire(job.id) == (0 if job.lease is None else 1)
            if job.lease is not None:
                job.expired = True
                self.seen["expired"] += 1

        @precondition(lambda self: self.jobs)
        @rule(data=st.data(), batch_size=st.integers(1, 3))
        def agent_dies(self, data: st.DataObject, batch_size: int) -> None:
            """A claim lapses and the reaper sweeps at once."""
            self.expire(data)
            self.reap(batch_size)

        @rule(batch_size=st.integers(1, 3))
        def reap(self, batch_size: int) -> None:
            due = [j for j in self.jobs.values() if j.lease is not None and j.expired]
            for job in self.jobs.values():
                if job.revoked is not None and job.revoked_expired:
                    self.seen["revoked claim reaped"] += 1
                    job.revoked = None
            requeued = failed = 0
            for job in due:
                job.expiries += 1
                job.end_attempt("expired")
                if self.max_reclaims and job.expiries >= self.max_reclaims:
                    job.status = JobStatus.FAILURE
                    job.message = f"lease expired {job.expiries} times"
                    failed += 1
                else:
                    job.status = JobStatus.QUEUED
                    requeued += 1
            self.seen["reaped: requeued"] += requeued
            self.seen["reaped: failed"] += failed
            result = self.run(store.reap(batch_size, self.max_reclaims))
            assert (result.requeued, result.failed) == (requeued, failed)
            # Each expiry is reaped once: a second sweep finds nothing and changes nothing.
            before = raw.snapshot()
            assert self.run(store.reap(batch_size, self.max_reclaims)).total == 0
            assert raw.snapshot() == before

        @precondition(lambda self: self.jobs)
        @rule(data=st.data(), lease=st.sampled_from(LEASES))
        def release_and_reclaim(self, data: st.DataObject, lease: int) -> None:
            """The agent gives a job back and claims it again: the first claim id is stale
            from now on, while a claim row exists (the fencing case that matters most)."""
            job = self.pick(data, leased)
            claim_id = self.claim_id_for(data, job, "current")
            self.set_status(job, JobStatus.QUEUED, claim_id, "own", False, None)
            if job.status != JobStatus.QUEUED:
                return
            call = store.claim_job(ws, job.agent, job.id, lease)
            if job.revoked is not None:  # another claim's holder has not let go yet
                self.refused(NotClaimable, call, {"jobStatus": "queued", "claimHeld": True})
            else:
                self.claimed(job, self.run(call), lease)

        @precondition(lambda self: self.jobs)
        @rule(
            data=st.data(),
            status=st.sampled_from(WRITE_STATUSES),
            heartbeat=st.booleans(),
        )
        def stale_write(self, data: st.DataObject, status: JobStatus, heartbeat: bool) -> None:
            """A late agent writes with the claim id of an earlier attempt of the job."""
            job = self.pick(data, has_stale_claims)
            claim_id = self.claim_id_for(data, job, "stale")
            if heartbeat:
                self.beat(job, claim_id, None, "own")
            else:
                self.set_status(job, status, claim_id, "own", False, "late")

        @precondition(lambda self: self.jobs)
        @rule(
            data=st.data(),
            status=st.sampled_from(WRITE_STATUSES),
            message=st.sampled_from((None, "first", "second")),
        )
        def report(self, data: st.DataObject, status: JobStatus, message: str | None) -> None:
            """The agent reports a status (complete, fail, release) with its claim id."""
            job = self.pick(data, leased)
            claim_id = self.claim_id_for(data, job, "current")
            self.set_status(job, status, claim_id, "own", False, message)

        @precondition(lambda self: self.jobs)
        @rule(
            data=st.data(),
            status=st.sampled_from(WRITE_STATUSES),
            message=st.sampled_from((None, "first", "second")),
            force=st.sampled_from((False, False, False, True)),
        )
        def operator_writes(
            self, data: st.DataObject, status: JobStatus, message: str | None, force: bool
        ) -> None:
            """An operator cancels, requeues or ends a job without a claim id (``force``: not
            waiting for the agent holding its claim)."""
            job = self.pick(data, leased)
            self.set_status(job, status, None, "operator", False, message, force)

        @precondition(lambda self: self.jobs)
        @rule(
            data=st.data(),
            status=st.sampled_from(WRITE_STATUSES),
            choice=st.sampled_from(CLAIM_CHOICES),
            scope=st.sampled_from(SCOPES),
            require_claim_id=st.booleans(),
        )
        def any_write(
            self,
            data: st.DataObject,
            status: JobStatus,
            choice: str,
            scope: str,
            require_claim_id: bool,
        ) -> None:
            """Any status write: stale or made-up claim ids, another agent's key, an agent key
            without a claim id under ``requireClaimId``, late repeats of a terminal status."""
            job = self.pick(data, has_stale_claims)
            claim_id = self.claim_id_for(data, job, choice)
            self.set_status(job, status, claim_id, scope, require_claim_id, "late")

        def set_status(
            self,
            job: ModelJob,
            status: JobStatus,
            claim_id: UUID | None,
            scope: str,
            require_claim_id: bool,
            message: str | None,
            force: bool = False,
        ) -> None:
            """The fencing rules, stated once more, independently of the store."""
            revoked = job.revoked is not None and claim_id == job.revoked
            agent_scope = self.agent_scope(job, scope)
            call = store.set_status(
                ws,
                job.id,
                status,
                claim_id=claim_id,
                message=message,
                external_id=None,
                metadata=None,
                agent_scope=agent_scope,
                require_claim_id=require_claim_id,
                force=force,
            )
            details: dict[str, Any] = {"jobStatus": job.status.value}
            if scope == "other":
                self.refused(NotFound, call)
            elif claim_id is not None:
                if job.claim_id == claim_id:
                    self.applied(job, status, message, call)
                elif job.claim_id is not None:
                    details["attempt"] = len(job.attempts)
                    self.refused(ClaimMismatch, call, details)
                    self.let_go(job, revoked)
                elif self.outcome_of(job, claim_id) in ("completed", "cancelled") and (
                    job.status == status
                ):
                    self.idempotent(job, call)
                    self.let_go(job, revoked)
                else:
                    self.refused(ClaimLost, call, details)
                    self.let_go(job, revoked)
            elif require_claim_id and agent_scope is not None and job.lease is not None:
                self.refused(ValidationError, call)
            elif job.status in TERMINAL_STATUSES and job.status == status:
                self.idempotent(job, call)
            else:
                # V1 parity: without a claim id any transition is applied, a finished
                # job included (an operator's requeue; its next claim is attempt N+1). A
                # claim still held is kept as revoked, unless forced.
                if force:
                    job.revoked = None
                elif job.lease is not None:
                    self.seen["claim revoked"] += 1
                    job.revoked, job.revoked_expired = job.claim_id, job.expired
                self.applied(job, status, message, call)

        def let_go(self, job: ModelJob, revoked: bool) -> None:
            """The holder of a revoked claim wrote with it: the job waits no longer."""
            if revoked:
                self.seen["revoked claim let go"] += 1
                job.revoked = None

        def agent_scope(self, job: ModelJob, scope: str) -> UUID | None:
            if scope == "operator":
                return None
            return job.agent if scope == "own" else self.other_agent(job.agent)

        def outcome_of(self, job: ModelJob, claim_id: UUID) -> str | None:
            return next((a.outcome for a in job.attempts if a.claim_id == claim_id), None)

        def idempotent(self, job: ModelJob, call: Coroutine[Any, Any, Any]) -> None:
            self.seen["idempotent repeat"] += 1
            before = raw.snapshot()
            answer = self.run(call)
            assert answer.status == job.status
            assert raw.snapshot() == before, "a repeated terminal status changed rows"

        def applied(
            self,
            job: ModelJob,
            status: JobStatus,
            message: str | None,
            call: Coroutine[Any, Any, Any],
        ) -> None:
            self.seen[f"applied: {job.status.value} → {status.value}"] += 1
            answer = self.run(call)
            assert answer.status == status
            job.end_attempt(_outcome_for(status))
            job.status = status
            if message is not None:
                job.message = message

        # --- the tables against the model -----------------------------------------------
        @invariant()
        def tables_match_the_model(self) -> None:
            self.seen["steps"] += 1
            jobs = raw.jobs()
            assert set(jobs) == {str(j) for j in self.jobs}
            for job in self.jobs.values():
                status, message, completed, started = jobs[str(job.id)]
                assert (status, message) == (job.status.value, job.message), job
                assert completed == (job.status in TERMINAL_STATUSES), job
                assert started or not job.attempts, job

            assert raw.revoked() == {
                str(j.id): str(j.revoked) for j in self.jobs.values() if j.revoked is not None
            }, "revoked claims"

            claims = raw.claims()
            claimed_jobs = [c[0] for c in claims]
            assert len(claimed_jobs) == len(set(claimed_jobs)), "two claim rows for one job"
            leased = {str(j.id): j for j in self.jobs.values() if j.lease is not None}
            assert set(claimed_jobs) == set(leased), "claim row ⇔ inProgress under a lease"
            for job_id, claim_id, attempt, lease, expired in claims:
                job = leased[job_id]
                assert jobs[job_id][0] == JobStatus.IN_PROGRESS.value
                assert (claim_id, attempt, lease, expired) == (
                    str(job.claim_id),
                    len(job.attempts),
                    job.lease,
                    job.expired,
                ), job

            by_job: dict[str, list[tuple[int, str | None, str | None, bool]]] = {}
            for job_id, number, attempt_claim, outcome, ended in raw.attempts():
                by_job.setdefault(job_id, []).append((number, attempt_claim, outcome, ended))
            for job in self.jobs.values():
                rows = by_job.get(str(job.id), [])
                assert [r[0] for r in rows] == list(range(1, len(rows) + 1)), "attempt gap"
                # A running leased attempt lives in its claim row (checked above): its
                # job_attempt row is written once, as it ends. An unleased one has an open row.
                live = job.lease is not None
                expected = [
                    (a.number, None if a.claim_id is None else str(a.claim_id), a.outcome)
                    for a in (job.attempts[:-1] if live else job.attempts)
                ]
                assert [r[:3] for r in rows] == expected, job
                open_rows = [r for r in rows if r[2] is None]
                assert all(r[3] == (r[2] is not None) for r in rows), "ended_at ⇔ outcome"
                running_unleased = job.status == JobStatus.IN_PROGRESS and not live
                assert len(open_rows) == (1 if running_unleased else 0)
                if open_rows:
                    assert open_rows[0] == rows[-1], "only the last attempt may be open"
                assert sum(r[2] == "expired" for r in rows) == job.expiries

    LeaseLifecycle.seen = seen
    return LeaseLifecycle
