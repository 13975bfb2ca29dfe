"""`make demo`'s script runs start to finish in under a minute and leaves nothing running."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def processes_with(marker: str) -> list[int]:
    """Pids of live processes whose environment mentions ``marker`` (all inherit TMPDIR)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # gone, or not ours to read
        if marker.encode() in environ and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_demo_runs_and_cleans_up(tmp_path: Path) -> None:
    scratch = tmp_path / "demo-tmp"
    scratch.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("JOBAGENTCTL_", "CTRLPLANE_"))
    }
    # As `make demo` runs it: the venv's bin first on PATH.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["TMPDIR"] = str(scratch)
    demo = subprocess.run(
        ["bash", str(ROOT / "examples" / "demo.sh")],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard only: two busy cores, no speed claim here
        check=False,
    )
    assert demo.returncode == 0, demo.stderr[-4000:]
    out = demo.stdout + demo.stderr
    assert "attempts of the crashed job: #1 expired, #2 completed" in out
    assert out.count("successful  finished by") == 5
    assert "bob drained and exited 0" in out
    # Nothing it started is still running, and its temp dir is gone.
    assert processes_with(str(scratch)) == []
    assert list(scratch.iterdir()) == []
