"""A private, throw-away PostgreSQL cluster for the chaos harness and the soak test.

The harness restarts PostgreSQL on purpose, so it must never touch the machine's shared server
on 5432: this one lives in a temp dir, listens on its own port and is removed at the end.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from tests.fixtures import pgsync
from tests.fixtures.live_server import free_port

__all__ = ["PgCluster", "PgClusterUnavailable", "find_pg_bin"]

_BIN_CANDIDATES = ("/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin")
# initdb refuses to run as root; the cluster then belongs to this user.
_RUN_AS = "postgres"
_TIMEOUT = 90.0  # generous: two busy cores


class PgClusterUnavailable(RuntimeError):
    """No PostgreSQL binaries, or no way to run them (callers skip with this reason)."""


def find_pg_bin() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl`` (``JOBAGENTCTL_PG_BIN`` overrides)."""
    override = os.environ.get("JOBAGENTCTL_PG_BIN")
    for candidate in ([override] if override else []) + list(_BIN_CANDIDATES):
        if candidate and (Path(candidate) / "initdb").exists():
            return Path(candidate)
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    raise PgClusterUnavailable("no PostgreSQL binaries (initdb, pg_ctl) on this machine")


class PgCluster:
    """``initdb`` + ``pg_ctl`` in a temp dir; trust auth; ``restart(mode)`` for the faults.

    Durability settings keep commits safe against the crashes we inject (a process crash keeps
    the OS page cache, so ``fsync=off`` loses nothing; ``synchronous_commit`` stays on, since an
    acknowledged commit that vanishes would be a fault of our making, not of the code under test).
    """

    def __init__(self, base_dir: Path | None = None, *, password: str | None = None) -> None:
        """``password``: the cluster asks for passwords (``scram-sha-256``, TCP and socket)
        and this is the superuser's; None: trust."""
        self.bin = find_pg_bin()
        self.password = password
        self.root = Path(tempfile.mkdtemp(prefix="jobagentctl-pg-", dir=base_dir))
        self.data = self.root / "data"
        self.log_path = self.root / "postgres.log"
        self.port = free_port()
        self.restarts = 0
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            try:
                pwd.getpwnam(_RUN_AS)
            except KeyError:
                raise PgClusterUnavailable(
                    f"running as root and there is no {_RUN_AS!r} user for initdb"
                ) from None
            runuser = shutil.which("runuser")
            if runuser is None:
                raise PgClusterUnavailable("running as root and runuser(1) is missing")
            self._as_user = [runuser, "-u", _RUN_AS, "--"]
            shutil.chown(self.root, user=_RUN_AS)
        os.chmod(self.root, 0o755)

    @property
    def url(self) -> str:
        return self.database_url("postgres")

    def database_url(self, name: str) -> str:
        auth = "postgres" if self.password is None else f"postgres:{quote(self.password, safe='')}"
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{name}"

    def _run(self, *args: str, timeout: float = _TIMEOUT) -> None:
        proc = subprocess.run(
            [*self._as_user, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=self.root,
        )
        if proc.returncode != 0:
            raise PgClusterUnavailable(
                f"{Path(args[0]).name} failed ({proc.returncode}): "
                f"{(proc.stderr or proc.stdout).strip()[-1500:]}"
            )

    def _options(self) -> str:
        return (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c full_page_writes=off -c max_connections=200"
        )

    def start(self) -> PgCluster:
        """initdb (first time) and start; waits until it accepts connections."""
        if not (self.data / "PG_VERSION").exists():
            auth = ["-A", "trust"]
            if self.password is not None:
                pwfile = self.root / "pwfile"
                pwfile.write_text(self.password + "\n")
                if self._as_user:
                    shutil.chown(pwfile, user=_RUN_AS)
                auth = ["-A", "scram-sha-256", f"--pwfile={pwfile}"]
            self._run(
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                *auth,
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
            )
        self._pg_ctl("start")
        self.wait_ready()
        return self

    def _pg_ctl(self, action: str, mode: str | None = None) -> None:
        args = [str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log_path), "-w"]
        args += ["-t", str(int(_TIMEOUT))]
        if mode is not None:
            args += ["-m", mode]
        if action in ("start", "restart"):
            args += ["-o", self._options()]
        self._run(*args, action)

    def restart(self, mode: str = "fast") -> None:
        """``fast``: clients disconnected, clean shutdown. ``immediate``: a crash (recovery on
        start). Both cut every connection of every server replica."""
        self.restarts += 1
        self._pg_ctl("restart", mode)

    def halt(self, mode: str = "fast") -> None:
        """Stop the server, keeping its data (``resume`` starts it again): an outage."""
        self._pg_ctl("stop", mode)

    def resume(self) -> None:
        """Start a halted server again; waits until it accepts connections."""
        self._pg_ctl("start")
        self.wait_ready()

    def stop(self, mode: str = "fast") -> None:
        """Stop and remove everything (idempotent)."""
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(PgClusterUnavailable, subprocess.TimeoutExpired):
                self._pg_ctl("stop", mode)
        shutil.rmtree(self.root, ignore_errors=True)

    def wait_ready(self, timeout: float = _TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with pgsync.connect(self.url, timeout=3) as conn:
                    conn.fetch("SELECT 1")
                return
            except pgsync.CONNECT_ERRORS:  # not up yet (refused, or "starting up")
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def create_database(self, name: str) -> str:
        """A new empty database; its URL."""
        with pgsync.connect(self.url) as conn:
            conn.script(f"CREATE DATABASE {pgsync.quote_ident(name)}")
        return self.database_url(name)

    def drop_database(self, name: str) -> None:
        with pgsync.connect(self.url) as conn:
            conn.script(f"DROP DATABASE IF EXISTS {pgsync.quote_ident(name)} WITH (FORCE)")

    def __enter__(self) -> PgCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
