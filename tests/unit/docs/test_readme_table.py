"""The README's "Against ctrlplane itself" table names tests that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FILES = {
    "ctrl": "tests/integration/ctrlplane/test_cli_against_ctrlplane.py",
    "ours": "tests/system/ctrlplane/test_cli_against_ours.py",
    "live": "tests/system/cli/test_cli_live.py",
    "claims": "tests/system/cli/test_cli_claims_live.py",
    "e2e": "tests/system/run/test_run_results.py",
    "commands": "tests/integration/server/test_commands.py",
    "logs": "tests/system/cli/test_cli_logs.py",
}


def test_every_cell_names_a_test_that_exists() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Against ctrlplane itself") :]
    section = section[: section.index("\n## ", 1)]
    named = re.findall(r"`(\w+)::(\w+)`", section)
    assert len(named) >= 20
    missing = [
        f"{where}::{name}"
        for where, name in named
        if f"def {name}(" not in (ROOT / FILES[where]).read_text(encoding="utf-8")
    ]
    assert missing == []
