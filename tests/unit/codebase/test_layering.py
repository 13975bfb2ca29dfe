"""The architecture as a test: which part of jobagentctl may import which, who owns each
third-party library, and no import circle (STYLE.md; drawn in docs/architecture.md).

Every ``import`` in ``src/jobagentctl`` (top-level and lazy ones inside functions alike, read
with ``ast``; relative imports resolved) is checked against two tables:

- ``ALLOWED``: the parts a part may import. Calls flow one way, ``cli → {supervisor, client,
  settings} → {models, errors}`` and ``server → {models, errors}``; the client never imports
  the server, the server never the CLI nor the client, the supervisor never the server (it
  talks to the server through the client the CLI hands it). The one ``cli → server`` edge is
  the ``server …`` command group (``cli/server/``), which starts and administers the server.
- ``OWNERS``: the modules (or packages, ending in ``.``) that may import a library.

And no two modules of ``src/jobagentctl`` import each other, directly or through others
(:func:`circles`). Imports inside functions count: a lazy import only postpones the circle to
the first call, where a half-initialised module is just as likely (and the direction of calls is
as muddled). Imports under ``if TYPE_CHECKING:`` count too: they never run, but two modules that
name each other's types still depend on each other, and a reader still goes round. A module
imports the module it names (``from pkg import mod`` imports ``pkg.mod``; ``from pkg.mod import
name`` imports ``pkg.mod``), not the packages above it: a package's ``__init__`` that only
re-exports its own modules is no circle.
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[3] / "src" / "jobagentctl"
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
    # The gateway's client of ctrlplane (the server never imports our client package).
    "httpx": {"jobagentctl.client.", "jobagentctl.server.upstream.client"},
    "typer": {"jobagentctl.cli."},
    "click": set(),  # Typer vendors it: never import it (STYLE.md)
    "asyncpg": {"jobagentctl.server.store.postgres", "jobagentctl.server.store.postgres_url"},
    "sqlite3": {"jobagentctl.server.store.sqlite"},
    "fastapi": {"jobagentctl.server."},
    "starlette": {"jobagentctl.server."},
    "uvicorn": {"jobagentctl.server."},
    "uvloop": {"jobagentctl.server."},
    "httptools": {"jobagentctl.server."},
    "prometheus_client": {"jobagentctl.server.http.metrics", "jobagentctl.server.upstream.metrics"},
    "pydantic_settings": {"jobagentctl.server."},
}


def module_name(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, src: Path = SRC) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """``(line, imported module, names)`` for every import in the file, relative ones resolved
    (``names``: what a ``from … import`` takes); those under ``if TYPE_CHECKING:`` included."""
    name = module_name(path, src)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield node.lineno, module, tuple(alias.name for alias in node.names)


def imported(path: Path, src: Path = SRC) -> Iterator[tuple[int, str]]:
    """``(line, module)`` for the layer check: ``from jobagentctl import models`` imports the
    part ``models``."""
    for line, module, names in imports(path, src):
        yield line, module
        if module == "jobagentctl":
            for name in names:
                yield line, f"{module}.{name}"


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
        for line, module in imported(path, src):
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


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """Each module of ``src`` and the modules of ``src`` it imports (``TYPE_CHECKING`` ones too)."""
    modules = {module_name(p, src): p for p in src.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for _, module, names in imports(path, src):
            # `from pkg import mod` imports the module pkg.mod; `from mod import name` mod.
            targets = {f"{module}.{n}" for n in names} & modules.keys() or {module}
            graph[name] |= (targets & modules.keys()) - {name}
    return graph


def circles(src: Path = SRC) -> list[list[str]]:
    """Every import circle between modules of ``src``: the strongly connected components of
    the import graph (Tarjan), each as its sorted module names."""
    graph = import_graph(src)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(found)


def test_every_part_is_in_the_table() -> None:
    parts = {part(module_name(p)) for p in SRC.rglob("*.py")}
    assert parts <= set(ALLOWED), f"parts missing from ALLOWED: {sorted(parts - set(ALLOWED))}"


def test_imports_follow_the_layers_and_owners() -> None:
    found = violations()
    assert not found, "imports against the architecture (see docs/architecture.md):\n" + "\n".join(
        found
    )


def test_no_import_circles() -> None:
    found = circles()
    assert not found, "modules that import each other (directly or through others):\n" + (
        "\n".join(" ↔ ".join(circle) for circle in found)
    )


DOC = SRC.parents[1] / "docs" / "architecture.md"


def _doc_block(name: str) -> dict[str, set[str]]:
    """The ``<!-- NAME: begin -->`` … ``<!-- NAME: end -->`` block of docs/architecture.md as
    ``{left: {right, …}}`` from its ``left → a, b`` lines."""
    text = DOC.read_text(encoding="utf-8")
    block = text.split(f"<!-- {name}: begin -->", 1)[1].split(f"<!-- {name}: end -->", 1)[0]
    table: dict[str, set[str]] = {}
    for line in block.splitlines():
        if "→" not in line:
            continue
        left, right = (side.strip() for side in line.split("→", 1))
        table[left] = {item.strip() for item in right.split(",") if item.strip()}
    return table


def _doc_owner(path: str) -> str:
    """``cli/output.py`` → ``jobagentctl.cli.output``; ``server/`` → ``jobagentctl.server.``."""
    dotted = "jobagentctl." + path.removesuffix(".py").replace("/", ".")
    return dotted if path.endswith(".py") else dotted.rstrip(".") + "."


def test_the_picture_in_the_docs_is_the_rules() -> None:
    """docs/architecture.md's picture and owner list say what this test enforces: a rule
    changed here without the picture (or the other way round) fails."""
    picture = _doc_block("layers")
    rules = {name: allowed - {name} for name, allowed in ALLOWED.items()}
    for importer, extra in EXTRA.items():
        rules[importer.removeprefix("jobagentctl.")] = set(extra)
    assert picture == rules
    owners = {
        library: (set() if "nobody" in ",".join(paths) else {_doc_owner(p) for p in paths})
        for library, paths in _doc_block("owners").items()
    }
    assert owners == OWNERS


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


@pytest.mark.parametrize(
    ("module", "source", "circle"),
    [
        # Direct, at the top of the module.
        (
            "cli/context.py",
            "from jobagentctl.cli import output\n",
            ["jobagentctl.cli.context", "jobagentctl.cli.output"],
        ),
        # Through a third module, and lazy (inside a function).
        (
            "errors.py",
            "def f():\n    from jobagentctl.cli.params import uuid_arg\n",
            ["jobagentctl.cli.params", "jobagentctl.errors", "jobagentctl.settings"],
        ),
        # Relative, inside a method.
        (
            "cli/messages.py",
            "class C:\n    def m(self):\n        from . import output\n",
            ["jobagentctl.cli.messages", "jobagentctl.cli.output"],
        ),
    ],
)
def test_the_circle_check_catches(
    tmp_path: Path, module: str, source: str, circle: list[str]
) -> None:
    """The circle check can fail: one import added to a copy of the tree closes a circle."""
    copy = tmp_path / "src" / "jobagentctl"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__", "*.sql"))
    assert circles(copy) == []
    path = copy / module
    path.write_text(path.read_text(encoding="utf-8") + "\n" + source, encoding="utf-8")
    found = circles(copy)
    assert len(found) == 1 and set(circle) <= set(found[0]), found


def test_type_checking_imports_close_a_circle_too(tmp_path: Path) -> None:
    """An import that never runs (``if TYPE_CHECKING:``) still closes a circle."""
    copy = tmp_path / "src" / "jobagentctl"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__", "*.sql"))
    path = copy / "errors.py"
    extra = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from jobagentctl.cli.params import uuid_arg\n"
    )
    path.write_text(path.read_text(encoding="utf-8") + "\n" + extra, encoding="utf-8")
    assert any("jobagentctl.errors" in circle for circle in circles(copy))


def private_attributes(src: Path = SRC) -> list[str]:
    """Every pydantic private attribute declared by a class of ``src/jobagentctl/models``.

    Read with ``ast``: the name ``PrivateAttr`` anywhere, or a class field whose name starts with
    ``_`` (pydantic makes those private attributes).
    """
    found: list[str] = []
    for path in sorted((src / "models").rglob("*.py")):
        where = path.relative_to(src.parent)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Name | ast.Attribute | ast.alias) and "PrivateAttr" in (
                getattr(node, "id", None),
                getattr(node, "attr", None),
                getattr(node, "name", None),
            ):
                found.append(f"{where}:{node.lineno}: PrivateAttr")
            elif isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    target = stmt.target if isinstance(stmt, ast.AnnAssign) else None
                    if isinstance(target, ast.Name) and target.id.startswith("_"):
                        found.append(f"{where}:{stmt.lineno}: {node.name}.{target.id}")
    return sorted(found)


def test_no_private_attributes_on_wire_models() -> None:
    # A wire model carries its fields and nothing else: what travels beside one (the JSON as
    # sent, a claim's agent) is a value of its own, not hidden state on the model.
    assert private_attributes() == []


def test_the_private_attribute_check_catches(tmp_path: Path) -> None:
    models = tmp_path / "jobagentctl" / "models"
    models.mkdir(parents=True)
    (models / "wire.py").write_text(
        "from pydantic import BaseModel, PrivateAttr\n"
        "class A(BaseModel):\n    _sent: dict = PrivateAttr(default=None)\n"
        "class B(BaseModel):\n    _agent: int = 0\n    ok: int = 0\n",
        encoding="utf-8",
    )
    assert private_attributes(tmp_path / "jobagentctl") == [
        "jobagentctl/models/wire.py:1: PrivateAttr",
        "jobagentctl/models/wire.py:3: A._sent",
        "jobagentctl/models/wire.py:3: PrivateAttr",
        "jobagentctl/models/wire.py:5: B._agent",
    ]
