"""The checked-in completion scripts match what `jobagentctl completion SHELL` prints now."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jobagentctl.cli.app import app

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_checked_in_script_is_fresh(shell: str) -> None:
    result = CliRunner().invoke(app, ["completion", shell])
    assert result.exit_code == 0
    checked_in = (ROOT / "completions" / f"jobagentctl.{shell}").read_text()
    assert result.stdout == checked_in, "run `make completions`"
    assert "_JOBAGENTCTL_COMPLETE" in checked_in


def test_unknown_shell_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["completion", "powershell"])
    assert result.exit_code == 2
    assert "unsupported shell" in result.stderr


def test_completion_answers_through_the_entry_point(tmp_path: Path) -> None:
    """What the bash script asks for at runtime: the entry point answers with command names."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("JOBAGENTCTL_")},
        "_JOBAGENTCTL_COMPLETE": "complete_bash",
        "COMP_WORDS": "jobagentctl inspect",
        "COMP_CWORD": "1",
        "XDG_CONFIG_HOME": str(tmp_path),
    }
    exe = ROOT / ".venv" / "bin" / "jobagentctl"
    if not exe.exists():
        pytest.skip("the console script is not installed in .venv (run `make venv`)")
    result = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["inspect-claims"]
