"""Tab completion through the real entry point: the console script, as the bash script calls it
at runtime, answers with command names."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fixtures.cli import run_cli

# No developer settings (CTRLPLANE_*, COLUMNS…), as when this test was in tests/unit.
pytestmark = pytest.mark.usefixtures("isolated_env")


def test_completion_answers_through_the_entry_point(tmp_path: Path) -> None:
    """What the bash script asks for at runtime: the entry point answers with command names."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("JOBAGENTCTL_")},
        "_JOBAGENTCTL_COMPLETE": "complete_bash",
        "COMP_WORDS": "jobagentctl inspect",
        "COMP_CWORD": "1",
        "XDG_CONFIG_HOME": str(tmp_path),
    }
    result = run_cli(env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["inspect-claims"]
