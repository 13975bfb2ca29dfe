"""Exit codes the command chooses never pass for `run`'s own (issue 12 §3), on a real server,
through the CI recipe of docs/run.md run verbatim."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from .runs import DEADLINE, Harness

DOCS = Path(__file__).resolve().parents[3] / "docs" / "run.md"


def ci_recipe() -> str:
    """The bash block that follows "To make an empty queue green" in docs/run.md (with
    ``--wait 1s`` for its ``--wait 1m``: an empty queue need not cost the suite a minute)."""
    text = DOCS.read_text()
    after = text[text.index("To make an empty queue green") :]
    match = re.search(r"```bash\n(.*?)```", after, re.S)
    assert match is not None
    assert "--wait 1m" in match.group(1)
    return match.group(1).replace("--wait 1m", "--wait 1s")


def run_recipe(harness: Harness, job_script: str) -> subprocess.CompletedProcess[str]:
    workdir = harness.tmp_path / "ci"
    (workdir / "ci").mkdir(parents=True, exist_ok=True)
    job = workdir / "ci" / "job.sh"
    job.write_text(f"#!/bin/sh\n{job_script}\n")
    job.chmod(0o755)
    bin_dir = Path(sys.executable).parent
    env = {**harness.server.base_env(), **harness.server.env()}
    env.update(
        {
            "JOBAGENTCTL_AGENT": harness.agent_id,
            "TMPDIR": str(workdir),
            "PATH": f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}",
        }
    )
    return subprocess.run(
        ["bash", "-c", ci_recipe()],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE + 60,
        check=False,
    )


def test_the_ci_recipe_is_green_on_an_empty_queue(harness: Harness) -> None:
    result = run_recipe(harness, "exit 0")
    assert result.returncode == 0, result.stderr


def test_the_ci_recipe_is_red_when_the_command_itself_exits_7(harness: Harness) -> None:
    job_id = harness.enqueue()
    result = run_recipe(harness, "exit 7")
    assert result.returncode != 0, result.stderr
    job = harness.job(job_id)
    assert (job["status"], job["message"]) == ("failure", "exit code 7")
