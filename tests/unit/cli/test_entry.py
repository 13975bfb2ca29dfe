"""The console-script entry point's preparation of the stack before a command runs."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic.plugin import _loader

from jobagentctl.cli.entry import skip_pydantic_plugins


def test_the_cli_does_not_search_the_installed_distributions_for_pydantic_plugins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pydantic would read every distribution's entry points when it builds the first model (tens
    of ms of each command's start-up); this test fails if pydantic's cache moves, so that the
    saving cannot silently go."""
    monkeypatch.setattr(_loader, "_plugins", None)

    def searched(**_: Any) -> Any:
        raise AssertionError("pydantic searched the installed distributions for plugins")

    monkeypatch.setattr(_loader, "entry_points", searched)
    monkeypatch.delenv("PYDANTIC_DISABLE_PLUGINS", raising=False)
    skip_pydantic_plugins()
    assert list(_loader.get_plugins()) == []
