"""Fixtures of the `run` tests: every test without the developer's settings (``isolated_env``),
as in tests/unit."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_env(isolated_env: None) -> None:
    """No developer settings in these tests either (tests/fixtures/isolation.py)."""


@pytest.fixture
def short_tempdir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh temporary directory of our own, short enough for `redact add`'s socket to go
    there too (a deep one sends it to /tmp, which other runs share): tempfile's from now on."""
    directory = Path(tempfile.mkdtemp(prefix="jat-", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)
