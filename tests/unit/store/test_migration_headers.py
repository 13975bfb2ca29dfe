"""The expand/contract discipline, held on the files: every migration from the first headed one
on starts with ``-- compat: expand`` (the previous release runs on the schema it leaves) or
``-- compat: contract`` (it does not), the same in both dialects. docs/operators.md, "Upgrading",
says what each means for an operator."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobagentctl.server.store.schema_window import FIRST_HEADED_MIGRATION, Compat, compat_of

MIGRATIONS = Path(__file__).resolve().parents[3] / "src/jobagentctl/server/store/sql"
DIALECTS = ("sqlite", "postgres")


def _files(dialect: str) -> dict[int, Path]:
    found = sorted((MIGRATIONS / dialect / "migrations").glob("*.sql"))
    return {int(path.name[:4]): path for path in found}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_new_migration_declares_its_compat(dialect: str) -> None:
    files = _files(dialect)
    assert max(files) >= FIRST_HEADED_MIGRATION  # the rule has files to hold
    missing = [
        path.name
        for version, path in files.items()
        if version >= FIRST_HEADED_MIGRATION and compat_of(path.read_text(encoding="utf-8")) is None
    ]
    assert not missing, (
        f"{dialect} migrations without '-- compat: expand' or '-- compat: contract' as their "
        f"first line: {missing}"
    )


def test_both_dialects_declare_the_same() -> None:
    sqlite, postgres = (_files(dialect) for dialect in DIALECTS)
    assert sorted(sqlite) == sorted(postgres)
    for version in sqlite:
        compats = {
            compat_of(files[version].read_text(encoding="utf-8")) for files in (sqlite, postgres)
        }
        assert len(compats) == 1, f"migration {version}: the dialects declare {compats}"


@pytest.mark.parametrize(
    ("first_line", "expected"),
    [
        ("-- compat: expand", Compat.EXPAND),
        ("-- compat: contract  ", Compat.CONTRACT),
        ("-- compat: maybe", None),
        ("-- compat expand", None),
        ("CREATE TABLE t (x int);", None),
        ("", None),
    ],
)
def test_the_header_is_the_first_line_exactly(first_line: str, expected: Compat | None) -> None:
    assert compat_of(f"{first_line}\nSELECT 1;\n") is expected
    assert compat_of(f"-- a comment first\n{first_line}\n") is None
