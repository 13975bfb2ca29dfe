"""`server create-key` refuses a database whose schema is past this release's window, as
`server start` and `server migrate` do (exit 2, one line), on both databases."""

from __future__ import annotations

import json
from pathlib import Path

from jobagentctl.server.store.queries import migrations
from tests.fixtures.cli import clean_env, run_cli
from tests.fixtures.databases import sql


def test_create_key_refuses_a_schema_past_its_window(database_url: str, tmp_path: Path) -> None:
    env = clean_env(XDG_DATA_HOME=str(tmp_path), JOBAGENTCTL_SERVER_DATABASE=database_url)
    init = run_cli("server", "init", "-o", "json", env=env, timeout=60)
    assert init.returncode == 0, init.stderr
    workspace = json.loads(init.stdout)["workspaceId"]
    # A newer release's contract migration, recorded as that release would leave it.
    sqlite = database_url.startswith("sqlite")
    version = len(migrations("sqlite" if sqlite else "postgres")) + 1
    p = "?" if sqlite else "%s"
    now = "(julianday('now') - 2440587.5) * 86400.0" if sqlite else "now()"
    sql(
        database_url,
        f"INSERT INTO schema_migrations (version, applied_at, compat) VALUES ({p}, {now}, {p})",
        [version, "contract"],
    )
    ran = run_cli("server", "create-key", "--workspace", workspace, env=env, timeout=60)
    assert ran.returncode == 2, ran.stderr
    errors = [line for line in ran.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "newer than this release knows" in errors[0], ran.stderr
    assert "API key" not in ran.stdout + ran.stderr
    keys = sql(database_url, "SELECT count(*) FROM api_key")
    assert keys[0][0] == 1  # init's only: nothing written
