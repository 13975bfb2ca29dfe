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
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobagentctl.models import CLAIM_ROW_STATES, AttemptOutcome, JobStatus

SRC = Path(__file__).resolve().parents[1] / "src" / "jobagentctl"

# wire value → the members spelled so ("expired" is a claim state and an attempt outcome)
VOCABULARY: dict[str, str] = {}
for _member in [*JobStatus, *sorted(CLAIM_ROW_STATES), *AttemptOutcome]:
    _name = f"{type(_member).__name__}.{_member.name}"
    VOCABULARY[_member.value] = " or ".join(filter(None, [VOCABULARY.get(_member.value), _name]))

# (package or module prefix, value) → why that spelling is not ours.
ALLOWED: dict[tuple[str, str], str] = {
    # `run`'s own words: Verdict.COMPLETED/CANCELLED and Beat.CANCELLED (supervisor/outcome.py,
    # heartbeat.py) and the stop reason written to JOBAGENTCTL_STOP_REASON_FILE (docs/run.md:
    # lease_lost, cancelled, timeout, interrupted) are how a run ended, not a job's status.
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
