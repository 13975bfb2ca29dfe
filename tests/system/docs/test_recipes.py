"""Every fenced block of README.md and docs/*.md: run verbatim, or excluded with a reason.

``RUN`` names the test that runs each runnable block (the text is read from the doc at test
time, see ``recipes.py``); ``EXCLUDED`` says why a block is not run. ``test_every_block_is_
classified`` holds both against the docs, so a new or renamed block fails until it is put in
one of them. Blocks that are partly illustrative (a workflow's YAML, an ``export`` of a
placeholder host) have their meaningful shell lines run; the lines left out are listed below
with the reason, and checked against the doc too.
"""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import pytest

from jobagentctl import __version__
from jobagentctl.server.store.queries import migrations
from tests.fixtures.cli import clean_env as cli_env
from tests.fixtures.cli import cli_command, run_bash
from tests.fixtures.databases import _create, _drop, postgres_url, sql, with_database
from tests.fixtures.live_server import clean_env, free_port
from tests.fixtures.processes import TOKEN_VARIABLE, new_token
from tests.fixtures.waiting import wait_until

from .conftest import Sandbox, Session, needs, split_commands
from .recipes import ROOT, all_blocks, block, shell_lines, yaml_run_lines

RUN: dict[str, str] = {
    "README.md › Quick start": "test_make_targets_of_the_readme_exist",
    "README.md › Install": "test_install_extras_and_packages_are_those_of_pyproject",
    "README.md › Five minutes with a local server": "test_five_minutes_with_a_local_server",
    "README.md › Configuration": "test_the_config_example_uses_only_documented_keys",
    "README.md › A bash agent: claim, heartbeat, complete": "test_bash_agent.py (whole module)",
    "README.md › A CI pipeline": "test_readme_ci_workflow_run_lines",
    "README.md › A CI pipeline [2]": "test_readme_ci_shell_step",
    "README.md › Shell completion": "test_shell_completion_install_lines",
    "README.md › Development": "test_make_targets_of_the_readme_exist",
    "docs/operators.md › Quick start (SQLite)": "test_operators_quick_start",
    "docs/operators.md › PostgreSQL and replicas": "test_operators_postgres_migrate",
    "docs/operators.md › Serving HTTPS": "test_tls_recipes.py (whole module)",
    "docs/operators.md › A reverse proxy in front (nginx)": "test_tls_recipes.py (whole module)",
    "docs/operators.md › 1. Back up": "test_operators_upgrading_sqlite_backup",
    "docs/operators.md › 1. Back up [2]": "test_operators_upgrading_postgres",
    "docs/operators.md › 2. Migrate, then roll the servers": "test_operators_upgrading_postgres",
    "docs/operators.md › Downgrading": "test_operators_upgrading_postgres",
    "docs/run.md › `jobagentctl run -- CMD`": "test_run_md_first_examples",
    "docs/run.md › The command's environment": "test_run_md_stop_reason_trap",
    "docs/run.md › Reports and `--report`": "test_run_md_report_example_has_the_real_keys",
    "docs/run.md › Bash: run one job and act on the outcome": "test_run_md_outcome_recipe",
    "docs/run.md › Bash: run one job and act on the outcome [2]": "test_run_md_job_file_line",
    "docs/run.md › CI pipeline (GitHub Actions)": "test_run_md_ci_workflow_run_lines",
    "docs/run.md › CI pipeline (GitHub Actions) [2]": "test_run_md_ci_empty_queue_green",
}

EXCLUDED: dict[str, str] = {
    "docs/architecture.md › The picture": (
        "the layers as text (tests/unit/codebase/test_layering.py holds it equal to the rules "
        "it enforces)"
    ),
    "docs/architecture.md › The picture [2]": (
        "the libraries' owners (tests/unit/codebase/test_layering.py holds it equal to the rules "
        "it enforces)"
    ),
    "docs/protocol.md › 1. The life of a job and its claim": "a mermaid diagram",
    "docs/gateway.md › Who holds what": "a text diagram",
    "docs/gateway.md › Set-up": (
        "needs ctrlplane's API server and its key: tests/system/gateway (the stand-in) and "
        "tools/gateway_trial.py (the real server) run this set-up"
    ),
    "docs/operators.md › Watching claims": (
        "a captured 80x24 screen; tests/system/cli/test_watch_terminal.py compares it with the "
        "frame it draws in tmux (summary, header, each row's state and agent)"
    ),
    "docs/operators.md › PostgreSQL and replicas [2]": (
        "an error line as printed, not a command: tests/integration/store/test_pg_connect.py "
        "produces each cause it names against real PostgreSQL servers"
    ),
    "docs/run.md › Lifecycle": "a text diagram",
    "docs/run.md › When `run` dies or freezes: the watchdog": "a text diagram",
    "docs/run.md › systemd: a long-running agent": (
        "a systemd unit (no systemd in the test environment); its ExecStart is `run --loop`, "
        "whose SIGTERM drain is run by test_run_md_first_examples and tests/system/run"
    ),
}

# Lines of runnable blocks that are not run, and why (each must still be in the doc).
EXCLUDED_LINES: dict[str, str] = {
    'pip install "jobagentctl @ git+https://github.com/OWNER/jobagentctl"': (
        "installs from a placeholder repository over the network"
    ),
    "pipx install ./tools/jobagentctl   # wherever you vendor or publish it": (
        "installs from a placeholder path"
    ),
    "export JOBAGENTCTL_SERVER_DATABASE=postgresql://jobagent@db.internal:5432/jobagent": (
        "a placeholder host: the test sets the variable to its own PostgreSQL database"
    ),
    "jobagentctl server start --host 0.0.0.0 --port 8080": (
        "binds a fixed port on all interfaces of a shared machine; test_operators_quick_start "
        "runs `server start` on a free port"
    ),
    "export JOBAGENTCTL_URL=https://jobs.example.com JOBAGENTCTL_WORKSPACE=… JOBAGENTCTL_AGENT=…": (
        "placeholders: the test's environment points at its own server and agent"
    ),
    "export JOBAGENTCTL_API_KEY_FILE=/run/secrets/jobagentctl-key": (
        "a placeholder path: the test's environment carries the key"
    ),
}

# Words of runnable blocks replaced before running, and why (each must still be in the doc).
SUBSTITUTIONS: dict[str, tuple[str, str]] = {
    "/var/log/deploy.jsonl": ("$PWD/deploy.jsonl", "not writable by the tests"),
}


def _runnable(text: str) -> str:
    """The block's text without its EXCLUDED_LINES, with SUBSTITUTIONS applied."""
    kept = [line for line in text.splitlines() if line.strip() not in EXCLUDED_LINES]
    out = "\n".join(kept) + "\n"
    for old, (new, _) in SUBSTITUTIONS.items():
        out = out.replace(old, new)
    return out


def _doc_text() -> str:
    return "\n".join(b.text for b in all_blocks().values())


def test_every_block_is_classified() -> None:
    blocks = set(all_blocks())
    classified = set(RUN) | set(EXCLUDED)
    assert not set(RUN) & set(EXCLUDED)
    new = sorted(blocks - classified)
    gone = sorted(classified - blocks)
    assert not new, (
        "code blocks nobody runs: add each to RUN (with a test that runs it verbatim) or to "
        f"EXCLUDED (with the reason) in {__file__}: {new}"
    )
    assert not gone, f"classified blocks that are no longer in the docs: {gone}"
    here = Path(__file__).read_text(encoding="utf-8")
    here += (Path(__file__).parent / "test_bash_agent.py").read_text(encoding="utf-8")
    for key, test in RUN.items():
        name = test.split(" ", 1)[0]
        assert name.endswith(".py") or f"def {name}(" in here, f"{key}: no test {name}"
    text = _doc_text()
    for line in [*EXCLUDED_LINES, *SUBSTITUTIONS]:
        assert line in text, f"excluded line or substituted word no longer in the docs: {line!r}"


def _background(command: str) -> bool:
    return re.sub(r"\s+#.*$", "", command).rstrip().endswith("&")


# --- README ---------------------------------------------------------------------------------


def test_make_targets_of_the_readme_exist() -> None:
    """`make demo`, `make test`, … name real targets (run for real by tests/system/docs/test_demo.py
    and by the suite itself; here `make -n` proves the target exists without running it)."""
    needs("make")
    lines = shell_lines(block("README.md › Quick start").text)
    lines += shell_lines(block("README.md › Development").text)
    targets = [re.match(r"make (\S+)", line) for line in lines]
    assert all(targets), lines
    for match in targets:
        assert match is not None
        dry = subprocess.run(
            ["make", "-n", match.group(1)], cwd=ROOT, capture_output=True, text=True, check=False
        )
        assert dry.returncode == 0, (match.group(0), dry.stderr)


def test_install_extras_and_packages_are_those_of_pyproject() -> None:
    """Installing needs the network; what can rot is checked: the extras named exist, and the
    packages the comments list are the dependencies pyproject.toml declares."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]

    def names(requirements: list[str]) -> set[str]:
        return {re.split(r"[\[<>=;\s]", r, maxsplit=1)[0].lower() for r in requirements}

    base = names(project["dependencies"])
    for line in shell_lines(block("README.md › Install").text):
        command, _, comment = line.partition("#")
        listed = {n.strip().lower() for n in comment.split(":", 1)[1].split(",")}
        extras = re.findall(r"\.\[(\w+)\]", command)
        available = set(base)
        for extra in extras:
            assert extra in project["optional-dependencies"], extra
            available |= names(project["optional-dependencies"][extra])
        listed.discard("")
        assert listed <= available, (line, listed - available)


def test_five_minutes_with_a_local_server(tmp_path: Path) -> None:
    """Typed line by line into one shell, as a person would: each command ends before the next
    is typed, and after `server start &` the person waits for its "listening on" line."""
    needs("bash", "jq")
    workdir = tmp_path / "five"
    workdir.mkdir()
    env = {
        **clean_env(workdir),
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "JOBAGENTCTL_SERVER_PORT": str(free_port()),  # 8080 may be taken on a shared machine
        TOKEN_VARIABLE: new_token(),
    }
    session = Session(workdir, env)
    try:
        commands = split_commands(block("README.md › Five minutes with a local server").text)
        for command in commands:
            status = session.type(command)
            assert status == 0, f"{command!r} exited {status}\n{session.output()}"
            if _background(command):
                wait_until(
                    lambda: "listening on" in session.stdout + session.stderr,
                    what="the server to listen",
                )
        job = re.search(r"^job ([0-9a-f-]{36})$", session.stdout, re.M)
        assert job, session.output()
        assert re.search(r"^1\tcompleted\t", session.stdout, re.M), session.output()
        config = workdir / "config" / "jobagentctl" / "config.toml"
        assert config.stat().st_mode & 0o777 == 0o600  # "(mode 0600)"
        # Issue 12 §8, as the README says: a second --write-config refuses (exit 2).
        assert session.type(commands[0]) == 2, session.output()
    finally:
        session.close()


def _documented_config_keys() -> set[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    keys = {"default_profile"}
    for row in re.findall(r"^\|[^|\n]*\|([^|\n]*)\|", readme, re.M):
        keys |= set(re.findall(r"`(\w+)`", row))
    return keys


def test_the_config_example_uses_only_documented_keys() -> None:
    config = tomllib.loads(block("README.md › Configuration").text)
    known = _documented_config_keys()
    assert config["default_profile"] in config["profiles"]
    for name, profile in config["profiles"].items():
        assert set(profile) <= known, (name, set(profile) - known)


def test_readme_ci_workflow_run_lines(sandbox: Sandbox) -> None:
    """The workflow's `run:` lines, with its `env:` (an agent-scoped key): the loop drains the
    queue, a SIGTERM (a cancelled workflow) ends it with 0, and inspect-claims finds nothing
    stuck."""
    text = block("README.md › A CI pipeline").text
    lines = [line for line in yaml_run_lines(text) if line not in EXCLUDED_LINES]
    loop, inspect = lines
    assert "JOBAGENTCTL_API_KEY: ${{ secrets.JOBAGENTCTL_AGENT_KEY }}" in text
    key = sandbox.server.create_key(sandbox.agent_id)
    jobs = [sandbox.enqueue() for _ in range(2)]
    sandbox.release()
    agent = sandbox.line(loop, JOBAGENTCTL_API_KEY=key)
    runs = sandbox.dir / "runs.jsonl"
    wait_until(
        lambda: runs.exists() and len(runs.read_text().splitlines()) == 2,
        what="both jobs in runs.jsonl",
    )
    agent.proc.send_signal(signal.SIGTERM)
    assert agent.wait() == 0, agent.output()
    assert [sandbox.job(j)["status"] for j in jobs] == ["successful"] * 2
    check = sandbox.line(inspect, JOBAGENTCTL_API_KEY=key)
    assert check.wait() == 0, check.output()
    sandbox.no_leftovers()


@pytest.mark.parametrize(
    ("deploy_exit", "code", "says"),
    [
        ("0", 0, "deployed"),
        # Issue 12 §3: a deploy that exits 7 or 75 itself (so `run` exits 7 or 75, as for
        # "nothing queued" or "lease lost") is a failed deploy: the verdict tells them apart.
        ("7", 1, "deploy failed: exit 7"),
        ("75", 1, "deploy failed: exit 75"),
    ],
)
def test_readme_ci_shell_step(sandbox: Sandbox, deploy_exit: str, code: int, says: str) -> None:
    needs("bash", "jq")
    # A stale record of an earlier run must not be read as this one's.
    (sandbox.dir / "run.json").write_text('{"verdict": "no_job"}\n')
    recipe = block("README.md › A CI pipeline [2]").text
    job = sandbox.enqueue()
    sandbox.release()
    step = sandbox.bash(recipe, DEPLOY_EXIT=deploy_exit)
    assert step.wait() == code, step.output()
    assert says in step.stdout, step.output()
    expected = "successful" if deploy_exit == "0" else "failure"
    assert sandbox.job(job)["status"] == expected
    assert len(sandbox.deploys()) == 1


def test_empty_queue_recipes_are_green(sandbox: Sandbox) -> None:
    """Both "nothing queued" paths at once (they wait out --wait: 30 s and 1 min)."""
    needs("bash", "jq")
    readme = sandbox.bash(block("README.md › A CI pipeline [2]").text)
    run_md = sandbox.bash(block("docs/run.md › CI pipeline (GitHub Actions) [2]").text)
    assert readme.wait(240) == 0, readme.output()
    assert "nothing queued" in readme.stdout
    assert run_md.wait(240) == 0, run_md.output()
    assert not sandbox.deploys()


def test_shell_completion_install_lines(sandbox: Sandbox) -> None:
    """Each line in its own shell, with HOME in the sandbox; the file it writes is the
    generated script in completions/."""
    shells = {"bash": "bash", "zsh": "zsh", "fish": "fish"}
    lines = shell_lines(block("README.md › Shell completion").text)
    ran = 0
    for line in lines:
        shell = re.search(r"completion (\w+)", line)
        target = shells[shell.group(1)] if shell else "bash"
        if target != "bash":
            continue  # zsh and fish lines use their shell's syntax; not installed here
        proc = sandbox.start([target, "-c", line])
        assert proc.wait() == 0, (line, proc.output())
        ran += 1
    assert ran
    written = Path(sandbox.env["HOME"]) / ".local/share/bash-completion/completions/jobagentctl"
    assert written.read_text() == (ROOT / "completions" / "jobagentctl.bash").read_text()


# --- docs/operators.md ----------------------------------------------------------------------


def test_operators_quick_start(tmp_path: Path) -> None:
    workdir = tmp_path / "ops"
    workdir.mkdir()
    env = {
        **clean_env(workdir),
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "JOBAGENTCTL_SERVER_PORT": str(free_port()),
        TOKEN_VARIABLE: new_token(),
    }
    box = Sandbox.bare(workdir, env)
    try:
        init, start = shell_lines(block("docs/operators.md › Quick start (SQLite)").text)
        first = box.start(["bash", "-c", init])
        assert first.wait() == 0, first.output()
        server = box.start(["bash", "-c", start])
        wait_until(lambda: "listening on" in server.stdout + server.stderr, what="listening")
        # The profile `init --write-config` wrote is enough for a client command.
        client = box.start(cli_command("agents", "list", "-o", "json"))
        assert client.wait() == 0, client.output()
        server.proc.send_signal(signal.SIGTERM)
        assert server.wait() == 0, server.output()
    finally:
        box.close()


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_operators_postgres_migrate(database_url: str, tmp_path: Path) -> None:
    text = block("docs/operators.md › PostgreSQL and replicas").text
    lines = [line for line in shell_lines(text) if line not in EXCLUDED_LINES]
    assert [line.split("#")[0].strip() for line in lines] == ["jobagentctl server migrate"]
    env = {
        **clean_env(tmp_path),
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "JOBAGENTCTL_SERVER_DATABASE": database_url,
        TOKEN_VARIABLE: new_token(),
    }
    box = Sandbox.bare(tmp_path, env)
    try:
        proc = box.start(["bash", "-c", lines[0]])
        assert proc.wait() == 0, proc.output()
    finally:
        box.close()


def _upgrading_step(heading: str, env: dict[str, str], cwd: Path) -> str:
    """Run the block under ``heading`` of docs/operators.md verbatim; its stdout."""
    ran = run_bash(block(f"docs/operators.md › {heading}").text, env=env, cwd=cwd)
    assert ran.returncode == 0, ran.stderr
    return ran.stdout


def test_operators_upgrading_sqlite_backup(tmp_path: Path) -> None:
    needs("sqlite3")
    env = cli_env(XDG_DATA_HOME=str(tmp_path / "data"), XDG_CONFIG_HOME=str(tmp_path / "config"))
    assert run_bash("jobagentctl server migrate", env=env).returncode == 0  # the default file
    _upgrading_step("1. Back up", env, tmp_path)
    copy = sqlite3.connect(tmp_path / "jobagent-before-upgrade.db")
    try:
        versions = copy.execute("SELECT count(*) FROM schema_migrations").fetchone()[0]
    finally:
        copy.close()
    assert versions == len(migrations("sqlite"))


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_operators_upgrading_postgres(database_url: str, tmp_path: Path) -> None:
    """Back up, migrate (the version printed first), then the downgrade's restore into an
    empty database: the restored one holds the schema and the rows of the backup."""
    needs("pg_dump", "pg_restore")
    env = cli_env(
        XDG_CONFIG_HOME=str(tmp_path / "config"), JOBAGENTCTL_SERVER_DATABASE=database_url
    )
    sql(database_url, "INSERT INTO workspace (id, name, slug, created_at) VALUES "
        "('6f1d2c1e-0000-4000-8000-000000000001', 'kept', 'kept', now())")  # fmt: skip
    _upgrading_step("1. Back up [2]", env, tmp_path)
    migrated = _upgrading_step("2. Migrate, then roll the servers", env, tmp_path)
    assert migrated.splitlines()[0] == f"jobagentctl {__version__}"
    empty = f"jat_restored_{uuid.uuid4().hex[:12]}"
    _create(empty)
    try:
        restored = with_database(postgres_url(), empty)
        _upgrading_step("Downgrading", {**env, "RESTORED_DATABASE": restored}, tmp_path)
        assert sql(restored, "SELECT slug FROM workspace") == [("kept",)]
        versions = sql(restored, "SELECT count(*) FROM schema_migrations")
        assert versions == [(len(migrations("postgres")),)]
    finally:
        _drop(empty)


# --- docs/run.md ----------------------------------------------------------------------------


def test_run_md_first_examples(sandbox: Sandbox) -> None:
    one, wait, loop = shell_lines(block("docs/run.md › `jobagentctl run -- CMD`").text)
    sandbox.write("job", (sandbox.dir / "deploy.sh").read_text(), executable=True)
    sandbox.release()
    for line in (one, wait):
        job = sandbox.enqueue()
        proc = sandbox.line(line)
        assert proc.wait() == 0, (line, proc.output())
        assert sandbox.job(job)["status"] == "successful"
    job = sandbox.enqueue()
    agent = sandbox.line(loop)
    report = sandbox.dir / "runs.jsonl"
    wait_until(lambda: report.exists() and report.read_text().strip(), what="the loop's report")
    agent.proc.send_signal(signal.SIGTERM)  # drain: nothing running, exit 0
    assert agent.wait() == 0, agent.output()
    assert sandbox.job(job)["status"] == "successful"
    sandbox.no_leftovers()


def test_run_md_stop_reason_trap(sandbox: Sandbox) -> None:
    """The trap line, in a command that `run --timeout` stops: it learns why."""
    (trap,) = shell_lines(block("docs/run.md › The command's environment").text)
    sandbox.write(
        "graceful.sh",
        "#!/usr/bin/env bash\ncleanup() { echo cleaned up; }\n"
        f"{trap}\necho started\nsleep 300 &\nwait $!\n",
        executable=True,
    )
    sandbox.enqueue()
    proc = sandbox.start(cli_command("run", "--timeout", "2s", "--", "./graceful.sh"))
    assert proc.wait() == 124, proc.output()
    assert "stopping: timeout\ncleaned up\n" in proc.stdout, proc.output()


def test_run_md_report_example_has_the_real_keys(sandbox: Sandbox) -> None:
    example = json.loads(block("docs/run.md › Reports and `--report`").text)
    sandbox.enqueue()
    sandbox.release()
    proc = sandbox.start(cli_command("run", "--report", "r.jsonl", "--", "./deploy.sh"))
    assert proc.wait() == 0, proc.output()
    (line,) = (sandbox.dir / "r.jsonl").read_text().splitlines()
    assert set(json.loads(line)) == set(example)


@pytest.mark.parametrize(
    ("deploy_exit", "code", "says"),
    [
        ("0", 0, "deployed"),
        ("7", 1, "deploy failed: exit 7"),
        ("75", 1, "deploy failed: exit 75"),
        ("125", 1, "deploy failed: exit 125"),
    ],
)
def test_run_md_outcome_recipe(sandbox: Sandbox, deploy_exit: str, code: int, says: str) -> None:
    """The recipe without its placeholder exports; the collisions of issue 12 §3 (a deploy
    that exits 7, 75 or 125 is a failed deploy, not "nothing to deploy", "lost the lease" or
    "jobagentctl could not claim"). Its empty-queue path waits 10 minutes: not run."""
    needs("bash", "jq")
    recipe = _runnable(block("docs/run.md › Bash: run one job and act on the outcome").text)
    job = sandbox.enqueue()
    sandbox.release()
    proc = sandbox.bash(recipe, DEPLOY_EXIT=deploy_exit)
    assert proc.wait() == code, proc.output()
    assert says in proc.stdout + proc.stderr, proc.output()
    assert sandbox.job(job)["status"] == ("successful" if code == 0 else "failure")
    (line,) = (sandbox.dir / "deploy.jsonl").read_text().splitlines()
    assert json.loads(line)["verdict"] == "completed"


def test_run_md_job_file_line(sandbox: Sandbox) -> None:
    (line,) = shell_lines(block("docs/run.md › Bash: run one job and act on the outcome [2]").text)
    sandbox.write(
        "show.sh", f'#!/usr/bin/env bash\n{line}\necho "version=$version"\n', executable=True
    )
    sandbox.enqueue(jobAgentConfig={"version": "1.2.3"})
    proc = sandbox.start(cli_command("run", "--", "./show.sh"))
    assert proc.wait() == 0, proc.output()
    assert "version=1.2.3" in proc.stdout


def test_run_md_ci_empty_queue_green(sandbox: Sandbox) -> None:
    """A job whose command exits 7 fails the step (the empty queue: see above)."""
    needs("bash", "jq")
    job = sandbox.enqueue()
    sandbox.release()
    step = sandbox.bash(
        block("docs/run.md › CI pipeline (GitHub Actions) [2]").text, DEPLOY_EXIT="7"
    )
    assert step.wait() != 0, step.output()
    assert sandbox.job(job)["status"] == "failure"


def test_run_md_ci_workflow_run_lines(sandbox: Sandbox) -> None:
    text = block("docs/run.md › CI pipeline (GitHub Actions)").text
    (line,) = [line for line in yaml_run_lines(text) if line not in EXCLUDED_LINES]
    job = sandbox.enqueue()
    sandbox.release()
    proc = sandbox.line(line)
    assert proc.wait() == 0, proc.output()
    assert sandbox.job(job)["status"] == "successful"
    assert json.loads((sandbox.dir / "report.jsonl").read_text())["status"] == "successful"
