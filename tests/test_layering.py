"""The architecture as a test: which part of jobagentctl may import which, and who owns each
third-party library (STYLE.md, issue 9 §8; drawn in docs/architecture.md).

Every ``import`` in ``src/jobagentctl`` (top-level and lazy ones inside functions alike, read
with ``ast``; relative imports resolved) is checked against two tables:

- ``ALLOWED``: the parts a part may import. Calls flow one way, ``cli → {supervisor, client,
  settings} → {models, errors}`` and ``server → {models, errors}``; the client never imports
  the server, the server never the CLI nor the client, the supervisor never the server (it
  talks to the server through the client the CLI hands it). The one ``cli → server`` edge is
  the ``server …`` command group (``cli/server/``), which starts and administers the server.
- ``OWNERS``: the modules (or packages, ending in ``.``) that may import a library.
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "jobagentctl"
ROOT = "(root)"  # jobagentctl/__init__.py: __version__ only

ALLOWED: dict[str, set[str]] = {
    "__main__": {"cli"},
    "cli": {"cli", "supervisor", "client", "settings", "durations", "models", "errors", ROOT},
    # Not settings (nor client): the names of the environment `run` gives its child, which the
    # client settings read too, are in models.py, the vocabulary both may import.
    "supervisor": {"supervisor", "durations", "models", "errors"},
    "client": {"client", "routes", "models", "errors", ROOT},
    "settings": {"settings", "durations", "models", "errors"},
    "server": {"server", "routes", "durations", "models", "errors", ROOT},
    "routes": {"routes"},
    "durations": {"durations", "errors"},
    "models": {"models", "errors"},
    "errors": {"errors"},
    ROOT: {ROOT},
}
# Edges allowed for one sub-package only (importer prefix → parts).
EXTRA: dict[str, set[str]] = {"jobagentctl.cli.server": {"server"}}

OWNERS: dict[str, set[str]] = {
    "rich": {"jobagentctl.cli.output"},
    "httpx": {"jobagentctl.client."},
    "typer": {"jobagentctl.cli."},
    "click": set(),  # Typer vendors it: never import it (STYLE.md)
    "psycopg": {"jobagentctl.server.store.postgres"},
    "psycopg_pool": {"jobagentctl.server.store.postgres"},
    "sqlite3": {"jobagentctl.server.store.sqlite"},
    "fastapi": {"jobagentctl.server."},
    "starlette": {"jobagentctl.server."},
    "uvicorn": {"jobagentctl.server."},
    "uvloop": {"jobagentctl.server."},
    "httptools": {"jobagentctl.server."},
    "prometheus_client": {"jobagentctl.server.metrics"},
    "pydantic_settings": {"jobagentctl.server."},
}


def module_name(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, src: Path = SRC) -> Iterator[tuple[int, str]]:
    """``(line, imported module)`` for every import in the file, relative ones resolved."""
    name = module_name(path, src)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield node.lineno, module
            if module.startswith("jobagentctl") and module.count(".") < 1:
                # `from jobagentctl import models` imports the part `models`
                for alias in node.names:
                    yield node.lineno, f"{module}.{alias.name}"


def part(module: str) -> str:
    """The architectural part of a jobagentctl module: its first component below the root."""
    pieces = module.split(".")
    if len(pieces) == 1:
        return ROOT
    return ROOT if pieces[1] == "__version__" else pieces[1]


def violations(src: Path = SRC) -> list[str]:
    found: list[str] = []
    for path in sorted(src.rglob("*.py")):
        importer = module_name(path, src)
        allowed = set(ALLOWED.get(part(importer), set()))
        for prefix, extra in EXTRA.items():
            if importer == prefix or importer.startswith(prefix + "."):
                allowed |= extra
        where = f"{path.relative_to(src.parent.parent)}"
        for line, module in imports(path, src):
            top = module.split(".")[0]
            if top == "jobagentctl":
                if part(module) not in allowed:
                    found.append(
                        f"{where}:{line}: {importer} imports {module}: "
                        f"{part(importer)} → {part(module)} is not allowed"
                    )
            elif top in OWNERS:
                owners = OWNERS[top]
                if not any(
                    importer == o or (o.endswith(".") and importer.startswith(o)) for o in owners
                ):
                    who = f"only {sorted(owners)} may import it" if owners else "never import it"
                    found.append(f"{where}:{line}: {importer} imports {top}: {who}")
    return found


def test_every_part_is_in_the_table() -> None:
    parts = {part(module_name(p)) for p in SRC.rglob("*.py")}
    assert parts <= set(ALLOWED), f"parts missing from ALLOWED: {sorted(parts - set(ALLOWED))}"


def test_imports_follow_the_layers_and_owners() -> None:
    found = violations()
    assert not found, "imports against the architecture (see docs/architecture.md):\n" + "\n".join(
        found
    )


def test_every_owner_exists() -> None:
    """An owner that moved or was renamed would make its rule vacuous."""
    modules = {module_name(p) for p in SRC.rglob("*.py")}
    for library, owners in OWNERS.items():
        for owner in owners:
            if owner.endswith("."):
                assert any(m.startswith(owner) for m in modules), (library, owner)
            else:
                assert owner in modules, (library, owner)


@pytest.mark.parametrize(
    ("module", "source", "problem"),
    [
        ("client/_evil.py", "from jobagentctl.server import app\n", "client → server"),
        ("server/_evil.py", "def f():\n    from ..cli import output\n", "server → cli"),
        ("supervisor/_evil.py", "import jobagentctl.server.store\n", "supervisor → server"),
        ("cli/_evil.py", "from jobagentctl import server\n", "cli → server"),
        ("cli/_evil.py", "import rich.table\n", "only ['jobagentctl.cli.output']"),
        ("server/store/_evil.py", "import sqlite3\n", "sqlite3"),
        ("cli/_evil.py", "import click\n", "never import it"),
    ],
)
def test_the_check_catches(tmp_path: Path, module: str, source: str, problem: str) -> None:
    """The check can fail: a copy of the source tree with one forbidden import added."""
    copy = tmp_path / "src" / "jobagentctl"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__", "*.sql"))
    assert violations(copy) == []
    (copy / module).write_text(source, encoding="utf-8")
    found = violations(copy)
    assert len(found) == 1 and problem in found[0], found
