"""Seeded bugs for the lease model: proof that test_lease_model.py fails when the store is wrong.

Each mutant patches one rule of the SQLite store, then runs the model test on SQLite in a fresh
interpreter (no saved hypothesis examples); every run must fail. Not part of the suite (it
patches the store's internals); run it by hand after changing the model:
``python -m tests.integration.store.mutation_check [RUNS]``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

_DECIDE = """
import jobagentctl.server.store.fencing as q, jobagentctl.server.store.sql_store as s
from jobagentctl.models import TERMINAL_STATUSES
orig = q.decide_status_change
def decide(ctx, status, *, claim_id, agent_scope, require_claim_id):
    if {condition}:
        return "apply"
    return orig(ctx, status, claim_id=claim_id, agent_scope=agent_scope,
                require_claim_id=require_claim_id)
s.decide_status_change = decide
"""
# Replaces the text of a named SQLite block (before the connector splits it into statements).
_QUERY = """
import jobagentctl.server.store.sqlite as s
s.Q[{name!r}] = {replacement}
"""

MUTANTS = {
    "a released attempt's claim id is accepted": _DECIDE.format(
        condition="claim_id is not None and ctx.current_claim_id is None"
        " and ctx.given_claim_outcome == 'released'"
    ),
    "another attempt's claim id is accepted": _DECIDE.format(
        condition="claim_id is not None and ctx.current_claim_id not in (None, claim_id)"
    ),
    "a repeated terminal status is written again": _DECIDE.format(
        condition="claim_id is None and ctx.status in TERMINAL_STATUSES and ctx.status == status"
    ),
    "a finished job refuses a requeue without claim id (the pre-V1-parity rule)": """
import jobagentctl.server.store.fencing as q, jobagentctl.server.store.sql_store as s
from jobagentctl.errors import JobTerminal
from jobagentctl.models import TERMINAL_STATUSES
orig = q.decide_status_change
def decide(ctx, status, *, claim_id, agent_scope, require_claim_id):
    if claim_id is None and ctx.status in TERMINAL_STATUSES and ctx.status != status:
        raise JobTerminal("the job already ended")
    return orig(ctx, status, claim_id=claim_id, agent_scope=agent_scope,
                require_claim_id=require_claim_id)
s.decide_status_change = decide
""",
    "heartbeats ignore the claim id": _QUERY.format(
        name="heartbeat",
        replacement='s.Q["heartbeat"].replace("AND (:claim_id IS NULL OR claim_id = :claim_id)",'
        ' "")',
    ),
    "reaped attempts stay open": _QUERY.format(
        name="reap",
        replacement='s.Q["reap"].replace("c.claimed_at, :now, \'expired\'",'
        ' "c.claimed_at, NULL, NULL")',
    ),
    "a status change keeps the claim row": _QUERY.format(
        name="apply_status",
        replacement='s.Q["apply_status"].replace("DELETE FROM job_claim WHERE",'
        ' "DELETE FROM job_claim WHERE false AND")',
    ),
    "claim-next takes the newest job": _QUERY.format(
        name="claim_next",
        replacement='s.Q["claim_next"].replace("ORDER BY q.created_at, q.rowid",'
        ' "ORDER BY q.created_at DESC, q.rowid DESC")',
    ),
    "maxReclaims is ignored": """
import jobagentctl.server.store.sql_store as s
orig = s.SqlStore.reap
async def reap(self, batch_size, max_reclaims, grace=None):
    return await orig(self, batch_size, 0, grace)
s.SqlStore.reap = reap
""",
    "cancel closes the attempt as completed": """
import jobagentctl.server.store.sql_store as s
from jobagentctl.models import AttemptOutcome
s.attempt_outcome_for = lambda status: (
    AttemptOutcome.RELEASED if status.value == "queued" else AttemptOutcome.COMPLETED)
""",
}

_RUN = """
import sys, pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "tests/integration/store/test_lease_model.py",
                      "-k", "sqlite", "-x"]))
"""


def main(runs: int = 3) -> int:
    survived = 0
    for name, patch in MUTANTS.items():
        caught = 0
        for _ in range(runs):
            shutil.rmtree(".hypothesis", ignore_errors=True)  # no replay of saved failures
            proc = subprocess.run(
                [sys.executable, "-c", patch + _RUN], capture_output=True, text=True, check=False
            )
            caught += proc.returncode != 0
        survived += runs - caught
        print(f"{caught}/{runs} caught: {name}")
    total = runs * len(MUTANTS)
    print(f"{total - survived} of {total} runs caught their bug")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
