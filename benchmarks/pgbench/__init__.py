"""pgbench ceilings: the database's work per claim+complete cycle, with no Python in between.

Three designs run on the same schema (the project's migrations), the same seeded queue and the
same concurrency:

- ``project``: exactly the statements the server runs. They are not copied: the store's own
  ``claim_next`` and ``set_status(successful)`` (what the server calls) run once against a
  scratch database with psycopg's cursor traced, and the recorded statements (read from the
  store's queries.sql at that moment, in the order the store sends them, BEGIN/COMMIT
  included) become the script.
  When the store engineer changes the SQL, the benchmark follows.
- ``seed``: the seed's minimal design (``seed.sql``): claim CTE with SKIP LOCKED; fenced
  ``DELETE job_claim … RETURNING`` → ``UPDATE job``.
- ``reduced``: the reduced-write variant proposed in issue 14 §2 (``reduced.sql``), on the
  project's schema, and ``reduced+schema`` with ``reduced_schema.sql`` applied first.

PostgreSQL CPU per cycle counts only the pgbench connections' own backends: each backend reads
its own /proc/self/schedstat (nanoseconds on CPU) in its first and its last transaction.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import psql

HERE = Path(__file__).resolve().parent
SCRIPTS = {
    "seed": HERE / "seed.sql",
    "reduced": HERE / "reduced.sql",
    "reduced+schema": HERE / "reduced.sql",
}
SCHEMA_EXTRA = {"reduced+schema": HERE / "reduced_schema.sql"}

# Per-client counters and the CPU probes around the measured script.
_PROBE = (
    "INSERT INTO bench_cpu VALUES "
    "(pg_backend_pid(), '{phase}', pg_read_file('/proc/self/schedstat'));"
)
_PREFIX = "\\set bn :bn + 1\n\\if :bn = 1\n" + _PROBE.format(phase="start") + "\n\\endif\n"
_SUFFIX = "\\if :bn = :b_per\n" + _PROBE.format(phase="end") + "\n\\endif\n"


# --- the project's statements, traced from the store ----------------------------------------------


@dataclass
class Traced:
    sql: str
    params: Any
    columns: list[str] | None = None
    row: Sequence[Any] | None = None
    phase: str = ""


def _query_text(query: Any, conn: Any) -> str:
    if isinstance(query, bytes):
        return query.decode()
    if isinstance(query, str):
        return query
    return str(query.as_string(conn))


async def _trace(url: str) -> tuple[list[Traced], dict[str, Any]]:
    import psycopg

    from benchmarks.direct import complete, setup_store
    from jobagentctl.server.store import open_store

    log: list[Traced] = []
    by_cursor: dict[int, Traced] = {}
    phase = [""]
    orig_execute = psycopg.AsyncCursor.execute
    orig_fetchone = psycopg.AsyncCursor.fetchone
    orig_fetchall = psycopg.AsyncCursor.fetchall

    async def execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        t = Traced(_query_text(query, self.connection), params, phase=phase[0])
        log.append(t)
        by_cursor[id(self)] = t
        return await orig_execute(self, query, params, **kw)

    async def fetchone(self: Any) -> Any:
        row = await orig_fetchone(self)
        t = by_cursor.get(id(self))
        if t is not None and row is not None and self.description:
            t.columns = [d.name for d in self.description]
            t.row = list(row.values()) if isinstance(row, dict) else list(row)
        return row

    async def fetchall(self: Any) -> Any:
        rows = await orig_fetchall(self)
        t = by_cursor.get(id(self))
        if t is not None and rows and self.description:
            t.columns = [d.name for d in self.description]
            t.row = list(rows[0].values()) if isinstance(rows[0], dict) else list(rows[0])
        return rows

    store = open_store(url, min_size=1, max_size=1)
    ws, agent = await setup_store(store, 1)
    try:
        psycopg.AsyncCursor.execute = execute  # type: ignore[method-assign]
        psycopg.AsyncCursor.fetchone = fetchone  # type: ignore[method-assign]
        psycopg.AsyncCursor.fetchall = fetchall  # type: ignore[method-assign]
        phase[0] = "claim"
        job = await store.claim_next(ws, agent, 60)
        if job is None:
            raise RuntimeError("trace: the store claimed nothing")
        phase[0] = "complete"
        await complete(store, ws, job)
    finally:
        psycopg.AsyncCursor.execute = orig_execute  # type: ignore[method-assign]
        psycopg.AsyncCursor.fetchone = orig_fetchone  # type: ignore[method-assign]
        psycopg.AsyncCursor.fetchall = orig_fetchall  # type: ignore[method-assign]
        await store.close()
    return log, {"ws": ws, "agent": agent, "job": job.id, "claim": job.claim_id}


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if hasattr(value, "obj") and type(value).__name__ in ("Jsonb", "Json"):
        import json

        value = json.dumps(value.obj)
    return "'" + str(value) + "'"


def _substitute(sql: str, params: Any, names: dict[str, str], defines: dict[str, str]) -> str:
    """psycopg placeholders → pgbench variables: ids known to ``names`` (the agent, the
    workspace, the claimed job's columns), every other non-NULL value as a constant variable
    added to ``defines`` (bound as a parameter, as psycopg binds it); NULL stays a literal."""

    def value_sql(key: str, value: Any) -> str:
        if value is None:
            return "NULL"
        text = _literal(value)
        if isinstance(value, uuid.UUID) and str(value) in names:
            return ":" + names[str(value)]
        var = f"p_{key}"
        defines[var] = text.strip("'") if text.startswith("'") else text
        return ":" + var

    if isinstance(params, dict):
        out = re.sub(r"%\((\w+)\)[sbt]", lambda m: value_sql(m.group(1), params[m.group(1)]), sql)
    elif params:
        seq = iter(enumerate(params))

        def positional(_: re.Match[str]) -> str:
            i, value = next(seq)
            return value_sql(str(i), value)

        out = re.sub(r"%[sbt]", positional, sql)
    else:
        out = sql
    return out.replace("%%", "%")


def _strip(sql: str) -> str:
    lines = [ln for ln in sql.strip().splitlines() if not ln.lstrip().startswith("--")]
    return "\n".join(lines).strip().rstrip(";")


def _statement_name(sql: str) -> str:
    from jobagentctl.server.store.queries import load_queries

    text = " ".join(_strip(sql).split())
    for name, query in load_queries("postgres").items():
        q = query.decode() if isinstance(query, bytes) else str(query)
        if " ".join(_strip(q).split()) == text:
            return name
    return text.split()[0] if text else "?"


def project_script(url: str) -> tuple[str, dict[str, str]]:
    """The pgbench script of the store's claim_next + set_status(successful), traced now,
    and the constants it binds (pgbench -D).

    ``url`` is a scratch database (migrated by the trace); the script uses :b_agent and :b_ws.
    """
    log, ids = asyncio.run(_trace(url))
    names: dict[str, str] = {str(ids["agent"]): "b_agent", str(ids["ws"]): "b_ws"}
    defines: dict[str, str] = {}
    claim = [t for t in log if t.phase == "claim"]
    complete = [t for t in log if t.phase == "complete"]
    # The claim statement is the one whose row carries the job id; its columns become variables.
    gset: Traced | None = None
    for t in claim:
        if t.row is not None and t.columns and ids["job"] in t.row:
            gset = t
    if gset is None or gset.columns is None or gset.row is None:
        raise RuntimeError("trace: no claim statement returned the claimed job")
    for col, value in zip(gset.columns, gset.row, strict=True):
        if value in (ids["job"], ids["claim"]) and str(value) not in names:
            names[str(value)] = col
    if str(ids["claim"]) not in names:
        raise RuntimeError("trace: the claim statement did not return the claim id")
    parts = ["-- Traced from the store: claim_next + set_status(successful)."]
    for t in claim + complete:
        sql = _strip(_substitute(t.sql, t.params, names, defines))
        if t is gset:
            # \gset cannot follow ";": the claim's column values become the next variables.
            parts.append(f"-- {t.phase}: {_statement_name(t.sql)}\n{sql} \\gset")
        else:
            parts.append(f"-- {t.phase}: {_statement_name(t.sql)}\n{sql};")
    return "\n".join(parts) + "\n", defines


# --- running pgbench ------------------------------------------------------------------------------


@dataclass
class PgbenchResult:
    design: str
    cycles: int
    tps: float
    backend_cpu: float  # seconds, the pgbench connections' backends only
    client_cpu: float  # seconds, the pgbench process

    @property
    def cpu_ms_per_cycle(self) -> float:
        return 1000 * self.backend_cpu / self.cycles if self.cycles else float("nan")


def seed_queue(url: str, agent: uuid.UUID | str, jobs: int) -> None:
    """``jobs`` queued jobs for ``agent``, oldest first (SPEC §2 columns only), then
    ``VACUUM ANALYZE job`` so the planner knows the queue's size. The other tables are left as
    the migrations made them (never analysed), as in a fresh production database."""
    psql(
        url,
        "INSERT INTO job (id, job_agent_id, workspace_id, status, created_at, updated_at) "
        "SELECT gen_random_uuid(), a.id, a.workspace_id, 'queued', "
        "now() + g * interval '1 microsecond', now() "
        f"FROM job_agent AS a, generate_series(1, {int(jobs)}) AS g WHERE a.id = '{agent}'",
    )
    psql(url, "VACUUM ANALYZE job")


def prepare_database(url: str, design: str, jobs: int) -> tuple[str, str]:
    """Migrate ``url`` (an empty database), create a workspace and agent, apply the design's
    schema changes and seed ``jobs`` jobs. Returns (workspace id, agent id)."""
    from benchmarks.direct import setup_store
    from jobagentctl.server.store import open_store

    async def setup() -> tuple[uuid.UUID, uuid.UUID]:
        store = open_store(url, min_size=1, max_size=1)
        try:
            return await setup_store(store, 0)
        finally:
            await store.close()

    ws, agent = asyncio.run(setup())
    extra = SCHEMA_EXTRA.get(design)
    if extra is not None:
        psql(url, extra.read_text())
    psql(url, "CREATE UNLOGGED TABLE bench_cpu (pid integer, phase text, stat text)")
    seed_queue(url, agent, jobs)
    return str(ws), str(agent)


def run(
    url: str,
    design: str,
    script: str,
    ws: str,
    agent: str,
    clients: int,
    per_client: int,
    defines: dict[str, str] | None = None,
) -> PgbenchResult:
    """Run ``script`` (one claim+complete cycle) ``per_client`` times on ``clients``
    connections (prepared statements, as psycopg prepares the server's repeated statements)."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as fh:
        fh.write(_PREFIX + script + "\n" + _SUFFIX)
        path = fh.name
    try:
        argv = [
            "pgbench",
            "-n",
            "-M",
            "prepared",
            "-c",
            str(clients),
            "-j",
            str(min(clients, 2)),
            "-t",
            str(per_client),
            "-D",
            f"b_agent={agent}",
            "-D",
            f"b_ws={ws}",
            "-D",
            "bn=0",
            "-D",
            f"b_per={per_client}",
            *(f"-D{k}={v}" for k, v in (defines or {}).items()),
            "-f",
            path,
            url,
        ]
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        import os

        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out = (proc.stdout.read() if proc.stdout else "") + (
            proc.stderr.read() if proc.stderr else ""
        )
        _ = time.perf_counter() - t0
    finally:
        Path(path).unlink(missing_ok=True)
    if proc.returncode != 0:
        raise RuntimeError(f"pgbench ({design}) failed:\n{out[-2000:]}")
    processed = re.search(r"number of transactions actually processed: (\d+)", out)
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
    failed = re.search(r"number of failed transactions: (\d+)", out)
    if not processed or not tps:
        raise RuntimeError(f"pgbench ({design}): cannot parse its output:\n{out[-2000:]}")
    if failed and int(failed.group(1)):
        raise RuntimeError(f"pgbench ({design}): {failed.group(1)} failed transactions")
    cycles = int(processed.group(1))
    rows = psql(
        url,
        "SELECT e.pid || ' ' || split_part(s.stat, ' ', 1) || ' ' || split_part(e.stat, ' ', 1) "
        "FROM bench_cpu AS s JOIN bench_cpu AS e ON e.pid = s.pid AND e.phase = 'end' "
        "WHERE s.phase = 'start'",
    ).splitlines()
    if len(rows) != clients:
        raise RuntimeError(f"pgbench ({design}): CPU probes of {len(rows)}/{clients} backends")
    backend = sum(int(r.split()[2]) - int(r.split()[1]) for r in rows) / 1e9
    psql(url, "TRUNCATE bench_cpu")
    return PgbenchResult(
        design, cycles, float(tps.group(1)), backend, usage.ru_utime + usage.ru_stime
    )
