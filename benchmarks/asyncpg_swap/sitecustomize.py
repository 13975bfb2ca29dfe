"""Run the test suite (or a server) with the PostgreSQL store over asyncpg: every Python process
started with this directory on ``PYTHONPATH`` (pytest, its xdist workers, the servers the tests
spawn) gets ``benchmarks.asyncpg_connector.AsyncpgConnector`` where ``open_store`` takes
``PostgresConnector``. The evidence of the driver A/B in docs/benchmarks.md:

    PYTHONPATH=benchmarks/asyncpg_swap .venv/bin/pytest -n 2 tests/store tests/server ...

An experiment's switch, not a setting: the server keeps one driver (psycopg).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

TARGET = "jobagentctl.server.store.postgres"
ROOT = str(Path(__file__).resolve().parents[2])


def _swapped(load: Callable[[ModuleType], None]) -> Callable[[ModuleType], None]:
    def exec_module(module: ModuleType) -> None:
        load(module)
        if ROOT not in sys.path:
            sys.path.append(ROOT)
        from benchmarks.asyncpg_connector import AsyncpgConnector

        module.PostgresConnector = AsyncpgConnector  # type: ignore[attr-defined]

    return exec_module


class _SwapFinder(importlib.abc.MetaPathFinder):
    """Loads the psycopg connector's module as usual, then points its connector at asyncpg's."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != TARGET:
            return None
        for finder in sys.meta_path:
            spec = None if finder is self else finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                loader = spec.loader
                loader.exec_module = _swapped(loader.exec_module)  # type: ignore[method-assign]
                return spec
        return None


sys.meta_path.insert(0, _SwapFinder())
