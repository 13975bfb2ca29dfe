"""One vocabulary (issue 9 §5): job statuses, claim states and attempt outcomes are spelled once,
in ``models.py``, and everywhere else named through ``JobStatus``, ``ClaimState`` and
``AttemptOutcome``.

An ``ast`` walk over ``src/jobagentctl`` (as tests/test_layering.py does for imports) fails on
any string constant equal to one of their wire values outside ``models.py``. Not flagged:

- docstrings and text that merely mentions a value (only a whole constant equal to a value is a
  spelling: ``"the job is queued"`` is prose);
- ``ClaimState.ALL``'s ``"all"``: a filter word, not a state any row or job is in, and an
  ordinary word elsewhere (``cli/status.py`` spells the job-status filter ``"all"`` once);
- the SQL files (SQL spells the values in its own statements; the store's tests hold them to
  the enums on both databases);
- ``ALLOWED`` below: another vocabulary whose words happen to be spelled like one of ours.

The environment's names likewise: a ``JOBAGENTCTL_*`` or ``CTRLPLANE_*`` name written as a whole
string is written once (where it is defined), and the ones ``models.py`` defines (the job
context and the rest of ``run``'s child environment, which the client settings read too) only
there (issue 9 §5).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobagentctl import models
from jobagentctl.models import CLAIM_ROW_STATES, AttemptOutcome, JobStatus

SRC = Path(__file__).resolve().parents[1] / "src" / "jobagentctl"

# wire value → the members spelled so ("expired" is a claim state and an attempt outcome)
VOCABULARY: dict[str, str] = {}
for _member in [*JobStatus, *sorted(CLAIM_ROW_STATES), *AttemptOutcome]:
    _name = f"{type(_member).__name__}.{_member.name}"
    VOCABULARY[_member.value] = " or ".join(filter(None, [VOCABULARY.get(_member.value), _name]))

# (package or module prefix, value) → why that spelling is not ours.
ALLOWED: dict[tuple[str, str], str] = {
    # `run`'s own words: Verdict.COMPLETED and StopReason.CANCELLED (supervisor/outcome.py),
    # the stop reason written to JOBAGENTCTL_STOP_REASON_FILE (docs/run.md: lease_lost,
    # cancelled, timeout, interrupted), are how a run ended, not a job's status.
    ("jobagentctl.supervisor.", "completed"): "run's Verdict.COMPLETED",
    ("jobagentctl.supervisor.", "cancelled"): "run's verdict / stop reason `cancelled`",
}


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                found.add(id(body[0].value))
    return found


def spellings(src: Path = SRC) -> Iterator[str]:
    """``path:line: 'value' (use Enum.MEMBER)`` for each hand-spelled value."""
    for path in sorted(src.rglob("*.py")):
        module = module_name(path, src)
        if module == "jobagentctl.models":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            if node.value not in VOCABULARY or id(node) in docstrings:
                continue
            if any(
                value == node.value and (module + ".").startswith(prefix)
                for prefix, value in ALLOWED
            ):
                continue
            where = path.relative_to(src.parent.parent)
            yield f"{where}:{node.lineno}: {node.value!r} (use {VOCABULARY[node.value]})"


def test_no_status_state_or_outcome_is_spelled_by_hand() -> None:
    found = list(spellings())
    assert not found, "spelled by hand, name it from jobagentctl.models:\n" + "\n".join(found)


def test_every_allowance_names_an_existing_part() -> None:
    modules = {module_name(p, SRC) + "." for p in SRC.rglob("*.py")}
    for prefix, value in ALLOWED:
        assert value in VOCABULARY, value
        assert any(m.startswith(prefix) for m in modules), prefix


@pytest.mark.parametrize(
    ("module", "source", "caught"),
    [
        ("server/_evil.py", 'STATES = ("active", "expired")\n', ["'active'", "'expired'"]),
        ("cli/_evil.py", 'def f(s):\n    return s == "unleased"\n', ["'unleased'"]),
        ("client/_evil.py", 'def f(c):\n    c.get(status="inProgress")\n', ["'inProgress'"]),
        ("server/store/_evil.py", 'OUT = {"released": 1}\n', ["'released'"]),
        ("supervisor/_evil.py", 'def f(j):\n    return j.status == "queued"\n', ["'queued'"]),
        # prose, docstrings, the filter word `all` and run's own `cancelled` pass
        ("cli/_ok.py", '"""Shows "expired" claims."""\nX = "the job is queued"\n', []),
        ("server/_ok.py", 'ALL = "all"\n', []),
        ("supervisor/_ok.py", 'REASON = "cancelled"\n', []),
    ],
)
def test_the_check_catches(tmp_path: Path, module: str, source: str, caught: list[str]) -> None:
    """The check can fail: one file, placed as a module of a tree like src/jobagentctl."""
    root = tmp_path / "src" / "jobagentctl"
    (root / module).parent.mkdir(parents=True)
    (root / module).write_text(source, encoding="utf-8")
    found = list(spellings(root))
    assert [line.split(": ")[1].split(" ")[0] for line in found] == caught, found


# --- environment variable names ------------------------------------------------------------

_ENV_NAME = re.compile(r"(JOBAGENTCTL|CTRLPLANE)_[A-Z0-9_]*")
# The names models.py gives (JOB_ID_ENV …, and CTRLPLANE_ENV's values).
SHARED_ENV: dict[str, str] = {
    value: f"models.{name}"
    for name, value in vars(models).items()
    if name.endswith("_ENV") and isinstance(value, str)
} | {value: f'models.CTRLPLANE_ENV["{key}"]' for key, value in models.CTRLPLANE_ENV.items()}


def env_spellings(src: Path = SRC) -> Iterator[str]:
    """``path:line: 'NAME' (…)`` for each environment name spelled outside its one definition."""
    first: dict[str, str] = {}
    for path in sorted(src.rglob("*.py")):
        module = module_name(path, src)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        docstrings = _docstrings(tree)
        # ``__all__`` lists Python names (CTRLPLANE_ENV), not environment variables.
        exported = {
            id(const)
            for assign in ast.walk(tree)
            if isinstance(assign, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in assign.targets)
            for const in ast.walk(assign.value)
        }
        skip = docstrings | exported
        where_file = path.relative_to(src.parent.parent)
        for node in sorted(ast.walk(tree), key=lambda n: getattr(n, "lineno", 0)):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            if id(node) in skip or not _ENV_NAME.fullmatch(node.value):
                continue
            where = f"{where_file}:{node.lineno}"
            if node.value in SHARED_ENV and module != "jobagentctl.models":
                yield f"{where}: {node.value!r} (use {SHARED_ENV[node.value]})"
            elif node.value in first:
                yield f"{where}: {node.value!r} (spelled again: defined at {first[node.value]})"
            else:
                first[node.value] = where


def test_every_environment_name_is_written_once() -> None:
    found = list(env_spellings())
    assert not found, "environment names spelled more than once:\n" + "\n".join(found)


def test_the_job_context_names_are_shared() -> None:
    """The names both settings (reading) and the supervisor (setting) use are in models.py."""
    for name in ("JOB_ID", "CLAIM_ID", "ATTEMPT", "LEASE_SECONDS", "URL", "WORKSPACE", "AGENT"):
        assert f"JOBAGENTCTL_{name}" in SHARED_ENV, name


@pytest.mark.parametrize(
    ("module", "source", "caught"),
    [
        ("supervisor/_evil.py", 'ENV = {"JOBAGENTCTL_JOB_ID": "1"}\n', ["'JOBAGENTCTL_JOB_ID'"]),
        ("cli/_evil.py", 'import os\nos.environ.get("CTRLPLANE_URL")\n', ["'CTRLPLANE_URL'"]),
        ("cli/_twice.py", 'A = "JOBAGENTCTL_NEW"\nB = "JOBAGENTCTL_NEW"\n', ["'JOBAGENTCTL_NEW'"]),
        # one definition, prose and docstrings pass
        ("cli/_ok.py", '"""Reads JOBAGENTCTL_JOB_ID."""\nX = "set JOBAGENTCTL_URL"\n', []),
        ("supervisor/_ok.py", 'OWN = "JOBAGENTCTL_SOMETHING_ELSE"\n', []),
        ("cli/_all.py", '__all__ = ["CTRLPLANE_ENV"]\nCTRLPLANE_ENV = {}\n', []),
    ],
)
def test_the_environment_check_catches(
    tmp_path: Path, module: str, source: str, caught: list[str]
) -> None:
    root = tmp_path / "src" / "jobagentctl"
    (root / module).parent.mkdir(parents=True)
    (root / module).write_text(source, encoding="utf-8")
    found = list(env_spellings(root))
    assert [line.split(": ")[1].split(" ")[0] for line in found] == caught, found
