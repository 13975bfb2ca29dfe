"""pgbench ceilings: the database's work per claim+complete cycle, with no Python in between.

Three designs run on the same schema (the project's migrations), the same seeded queue and the
same concurrency:

- ``project``: exactly the statements the server runs. They are not copied: the store's own
  ``claim_next`` and ``set_status(successful)`` (what the server calls) run once against a
  scratch database with the store's connector recorded (each named query it is asked to run,
  its parameters and first row, whatever the driver), and the recorded statements (read from
  the store's SQL files at that moment, in the order the store sends them, BEGIN/COMMIT
  included for a locked transaction) become the script.
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import psql
from jobagentctl.server.store.connector import Decide, Params, Row

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


# --- the project's statements, recorded from the store ----------------------------------------


@dataclass
class Traced:
    sql: str
    params: Any
    columns: list[str] | None = None
    row: Sequence[Any] | None = None
    phase: str = ""

    def saw(self, row: Mapping[str, Any] | None) -> None:
        """Keep the statement's first row (its column names, its values)."""
        if row is not None:  # keys() and values(): an asyncpg Record iterates over its values
            self.columns, self.row = list(row.keys()), list(row.values())


class _Recorder:
    """The statements a store's connector runs, read at the ``Connector`` protocol (a query's
    name and parameters, its rows) so that any driver behind it is recorded alike. Its query
    methods are wrapped on the one instance; a call a wrapped method makes to another (psycopg's
    ``each`` calls ``all``) is its own business and not recorded twice."""

    def __init__(self, connector: Any) -> None:
        from jobagentctl.server.store.queries import load_queries

        self.log: list[Traced] = []
        self.phase = ""
        self._sql = load_queries("postgres")
        self._connector = connector
        self._depth = 0
        self._originals = {
            name: getattr(connector, name) for name in ("one", "all", "each", "locked")
        }

    def __enter__(self) -> _Recorder:
        for name in self._originals:
            setattr(self._connector, name, getattr(self, "_" + name))
        return self

    def __exit__(self, *exc: object) -> None:
        for name in self._originals:
            delattr(self._connector, name)  # the class's method again

    def _note(self, sql: str, params: Any) -> Traced:
        traced = Traced(sql, params, phase=self.phase)
        if self._depth == 0:
            self.log.append(traced)
        return traced

    async def _call(self, method: str, *args: Any, **params: Any) -> Any:
        self._depth += 1
        try:
            return await self._originals[method](*args, **params)
        finally:
            self._depth -= 1

    async def _one(self, name: str, /, **params: Any) -> Row | None:
        traced = self._note(self._sql[name], params)
        row: Row | None = await self._call("one", name, **params)
        traced.saw(row)
        return row

    async def _all(self, name: str, /, **params: Any) -> list[Row]:
        traced = self._note(self._sql[name], params)
        rows: list[Row] = await self._call("all", name, **params)
        traced.saw(rows[0] if rows else None)
        return rows

    async def _each(
        self, name: str, limit: int, fresh: Callable[[], Params], /, **params: Any
    ) -> list[Row]:
        # PostgreSQL claims the batch in one statement with ``limit`` bound (Connector.each).
        traced = self._note(self._sql[name], None)

        def bound() -> Params:
            given = fresh()
            traced.params = {**params, **given, "limit": limit}
            return given

        rows: list[Row] = await self._call("each", name, limit, bound, **params)
        traced.saw(rows[0] if rows else None)
        return rows

    async def _locked(self, read: str, decide: Decide, /, **params: Any) -> Row | None:
        # Recorded as the PostgreSQL connector runs it: one transaction taking the claim's lock,
        # then the job's, reading, and writing what ``decide`` names (if anything).
        outermost = self._depth == 0
        reading = Traced(self._sql[read], params, phase=self.phase)
        written: list[Traced] = []

        def deciding(row: Row | None) -> tuple[str, Params] | None:
            reading.saw(row)
            write = decide(row)
            written[:] = [] if write is None else [Traced(self._sql[write[0]], write[1])]
            return write

        row: Row | None = await self._call("locked", read, deciding, **params)
        if outermost:
            if written:
                written[0].saw(row)
            locks = [
                Traced(self._sql[name], params)
                for name in ("lock_claim", "lock_job", "claim_appeared")
            ]
            statements = [Traced("BEGIN", None), *locks, reading, *written, Traced("COMMIT", None)]
            for traced in statements:
                traced.phase = self.phase
            self.log += statements
        return row


async def _trace(url: str) -> tuple[list[Traced], dict[str, Any]]:
    from benchmarks.direct import complete, setup_store
    from jobagentctl.server.store import open_store

    # No listener: only the operations' own statements reach the connector.
    store = open_store(url, min_size=1, max_size=1, listen=False)
    ws, agent = await setup_store(store, 1)
    try:
        with _Recorder(store.db) as recorder:
            recorder.phase = "claim"
            job = await store.claim_next(ws, agent, 60)
            if job is None:
                raise RuntimeError("trace: the store claimed nothing")
            recorder.phase = "complete"
            await complete(store, ws, job)
    finally:
        await store.close()
    return recorder.log, {"ws": ws, "agent": agent, "job": job.id, "claim": job.claim_id}


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, dict | list):
        import json

        value = json.dumps(value)
    return "'" + str(value) + "'"


def _substitute(
    sql: str, params: Params | None, names: dict[str, str], defines: dict[str, str]
) -> str:
    """The store SQL's ``%(name)s`` placeholders → pgbench variables: ids known to ``names``
    (the agent, the workspace, the claimed job's columns), every other non-NULL value as a
    constant variable added to ``defines`` (bound as a parameter, as the server binds it); NULL
    stays a literal."""

    def value_sql(key: str, value: Any) -> str:
        if value is None:
            return "NULL"
        text = _literal(value)
        if isinstance(value, uuid.UUID) and str(value) in names:
            return ":" + names[str(value)]
        var = f"p_{key}"
        defines[var] = text.strip("'") if text.startswith("'") else text
        return ":" + var

    given = params or {}
    out = re.sub(r"%\((\w+)\)s", lambda m: value_sql(m.group(1), given[m.group(1)]), sql)
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
    connections (prepared statements, as the server's driver prepares its repeated
    statements)."""
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
