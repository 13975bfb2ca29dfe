"""One vocabulary on both sides of the wire: each of these is written once, and everywhere
else named through what defines it.

- Job statuses, claim states and attempt outcomes: spelled in ``models.py``, named elsewhere through
  ``JobStatus``, ``ClaimState`` and ``AttemptOutcome``. An ``ast`` walk over ``src/jobagentctl`` (as
  tests/unit/codebase/test_layering.py does for imports) fails on any string constant equal to one
  of their wire values outside ``models.py``. Not flagged: docstrings and text that merely mentions
  a value (only a whole constant equal to a value is a spelling: ``"the job is queued"`` is prose);
  ``ClaimState.ALL``'s ``"all"``, a filter word, not a state any row or job is in, and an ordinary
  word elsewhere (``cli/status.py`` spells the job-status filter ``"all"`` once); the SQL files (SQL
  spells the values in its own statements; the store's tests hold them to the enums on both
  databases); ``ALLOWED`` below, another vocabulary whose words happen to be spelled like one of
  ours.
- The environment's names: a ``JOBAGENTCTL_*`` or ``CTRLPLANE_*`` name written as a whole string
  is written once (where it is defined), and the ones ``models.py`` defines (the job context and
  the rest of ``run``'s child environment, which the client settings read too) only there: a
  name read on one side and set on the other cannot drift apart.
- The API's paths: written in ``routes.py`` (``Routes``) only, which the server routes and the
  client fills (``Routes.path``); see :func:`route_literals`.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobagentctl import models
from jobagentctl.models import CLAIM_ROW_STATES, AttemptOutcome, JobStatus
from jobagentctl.routes import Routes

SRC = Path(__file__).resolve().parents[3] / "src" / "jobagentctl"

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
    # `server revoke-key`'s result: an API key's `revoked` field, not ClaimState.REVOKED.
    ("jobagentctl.cli.output", "revoked"): "the key-revoked view's `revoked` column",
    ("jobagentctl.cli.server.revoke_key", "revoked"): "the revoked key's `revoked` field",
    ("jobagentctl.server.store.entities", "revoked"): "api_key_revoked's `revoked` column",
}


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_tree(tmp_path: Path, module: str, source: str) -> Path:
    """A tree like ``src/jobagentctl`` with one module, ``source`` at ``module``: its root."""
    root = tmp_path / "src" / "jobagentctl"
    (root / module).parent.mkdir(parents=True, exist_ok=True)
    (root / module).write_text(source, encoding="utf-8")
    return root


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
        if module == "jobagentctl.models" or module.startswith("jobagentctl.models."):
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
    found = list(spellings(source_tree(tmp_path, module, source)))
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
            if node.value in SHARED_ENV and not module.startswith("jobagentctl.models"):
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
    found = list(env_spellings(source_tree(tmp_path, module, source)))
    assert [line.split(": ")[1].split(" ")[0] for line in found] == caught, found


# --- the API's paths -------------------------------------------------------------------------

_PLACEHOLDER = r"\{[^{}]*\}"  # a template's {agentId}, or an f-string's {…} value


def _route_pattern() -> re.Pattern[str]:
    """What a path of the API written by hand looks like, learnt from ``Routes`` itself.

    Two neighbouring segments of any template (``jobs/{…}``, ``{…}/heartbeat``,
    ``v1/workspaces``), a placeholder standing for any ``{…}``; or one segment of a template
    that no prose needs (``/job-agents``, ``/heartbeat``). The ordinary words among the
    segments (``/jobs``, ``/status``, ``/wait`` …) count only next to another segment, so prose
    that says "status/claim" or a base URL's "/api" is not taken for a route.
    """
    ordinary = {"api", "v1", "jobs", "claim", "status", "wait", "slug", "metrics"}
    pieces: set[str] = set()
    for name, template in vars(Routes).items():
        if not name.isupper():
            continue
        segments = [
            _PLACEHOLDER if s.startswith("{") else re.escape(s)
            for s in template.strip("/").split("/")
        ]
        pieces.update(f"{a}/{b}" for a, b in itertools.pairwise(segments))
        pieces.update(f"/{s}" for s in segments if s != _PLACEHOLDER and s not in ordinary)
        if len(segments) == 1:  # /healthz, /readyz, /metrics: a route of one word
            pieces.add(f"/{segments[0]}")
    return re.compile(f"(?:{'|'.join(sorted(pieces))})(?![\\w-])")


ROUTE = _route_pattern()


def _literal_text(node: ast.AST) -> str | None:
    """A string constant's text; an f-string's text with each value as ``{}``; else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
        value = node.value
        return value.decode("latin-1") if isinstance(value, bytes) else value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            str(part.value) if isinstance(part, ast.Constant) else "{}" for part in node.values
        )
    return None


def route_literals(src: Path = SRC) -> Iterator[str]:
    """``path:line: 'text'`` for each path of the API written by hand outside ``routes.py``:
    a string or f-string (``f"{ws}/jobs/{job_id}/heartbeat"``) that :data:`ROUTE` matches.
    Docstrings are prose and pass; comments are not in the ``ast``."""
    for path in sorted(src.rglob("*.py")):
        if module_name(path, src) == "jobagentctl.routes":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):  # its parts are read as a whole, once
                skip.update(id(part) for part in node.values)
        for node in ast.walk(tree):
            text = None if id(node) in skip else _literal_text(node)
            if text is not None and ROUTE.search(text):
                where = path.relative_to(src.parent.parent)
                yield f"{where}:{getattr(node, 'lineno', 0)}: {text!r}"


def test_no_path_of_the_api_is_written_by_hand() -> None:
    found = list(route_literals())
    assert not found, "paths written by hand, build them from jobagentctl.routes:\n" + "\n".join(
        found
    )


@pytest.mark.parametrize(
    ("module", "source", "caught"),
    [
        ("client/_evil.py", 'P = f"{ws}/jobs/{job_id}/heartbeat"\n', 1),
        ("client/_evil.py", 'P = "/api/v1/workspaces/" + ws + "/job-agents"\n', 2),
        ("client/_evil.py", 'P = f"/v1/workspaces/{ws}/job-claims"\n', 1),
        ("client/_evil.py", 'P = base + "/heartbeat"\n', 1),
        ("client/_evil.py", 'WHY = f"POST …/jobs/{{id}}/wait answered {status}"\n', 1),
        ("server/_evil.py", 'A = "/api/v1/workspaces/{ws}/jobs/{jobId}/attempts"\n', 1),
        ("cli/_evil.py", 'URL = f"{url}/readyz"\n', 1),
        ("server/_evil.py", 'B = b"/heartbeat"\n', 1),
        # prose, docstrings, a base URL's /api and routes.py itself pass
        (
            "cli/_ok.py",
            '"""Calls GET /v1/workspaces/slug/{slug}."""\nX = "a status/claim view"\n',
            0,
        ),
        ("client/_ok.py", 'HELP = "Server base URL, with or without /api."\n', 0),
        ("client/_ok.py", 'def f(u):\n    return u.removesuffix("/api")\n', 0),
        ("routes.py", 'HEARTBEAT = "/api/v1/workspaces/{ws}/jobs/{jobId}/heartbeat"\n', 0),
    ],
)
def test_the_route_check_catches(tmp_path: Path, module: str, source: str, caught: int) -> None:
    found = list(route_literals(source_tree(tmp_path, module, source)))
    assert len(found) == caught, found
