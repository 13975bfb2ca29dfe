"""Server settings (one JOBAGENTCTL_SERVER_* variable per setting) and lease resolution."""

from __future__ import annotations

import os
from typing import Any

import pydantic
import pytest

from jobagentctl.errors import ConfigError
from jobagentctl.server.service import resolve_lease
from jobagentctl.server.settings import ServerSettings, check_database_url, redact_url


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("JOBAGENTCTL_SERVER_"):
            monkeypatch.delenv(name)


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", "/data")
    settings = ServerSettings()
    assert settings.database == "sqlite:////data/jobagentctl/jobagent.db"
    assert (settings.host, settings.port) == ("127.0.0.1", 8080)
    assert (settings.lease_seconds, settings.min_lease_seconds, settings.max_lease_seconds) == (
        60,
        5,
        3600,
    )
    assert settings.reap_interval == 5.0
    assert settings.reap_batch_size == 1000
    assert settings.max_reclaims == 0
    assert settings.require_claim_id is False
    assert settings.max_wait_seconds == 30
    assert settings.max_body_bytes == 1024 * 1024


def test_every_setting_has_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    values = {
        "DATABASE": "postgresql://u@h:5432/d",
        "HOST": "0.0.0.0",
        "PORT": "9000",
        "LEASE_SECONDS": "30",
        "MIN_LEASE_SECONDS": "1",
        "MAX_LEASE_SECONDS": "600",
        "REAP_INTERVAL": "0.1",
        "REAP_BATCH_SIZE": "50",
        "MAX_RECLAIMS": "3",
        "REQUIRE_CLAIM_ID": "true",
        "MAX_WAIT_SECONDS": "5",
        "MAX_BODY_BYTES": "2048",
        "KEY_CACHE_SECONDS": "0",
    }
    for name, value in values.items():
        monkeypatch.setenv(f"JOBAGENTCTL_SERVER_{name}", value)
    settings = ServerSettings()
    assert settings.model_dump(include={k.lower() for k in values}) == {
        "database": "postgresql://u@h:5432/d",
        "host": "0.0.0.0",
        "port": 9000,
        "lease_seconds": 30,
        "min_lease_seconds": 1,
        "max_lease_seconds": 600,
        "reap_interval": 0.1,
        "reap_batch_size": 50,
        "max_reclaims": 3,
        "require_claim_id": True,
        "max_wait_seconds": 5,
        "max_body_bytes": 2048,
        "key_cache_seconds": 0,
    }
    # Flags (init arguments) beat the environment.
    assert ServerSettings(port=9100).port == 9100


def test_invalid_settings_are_refused() -> None:
    cases: tuple[dict[str, Any], ...] = (
        {"port": 70000},
        {"min_lease_seconds": 10, "max_lease_seconds": 5},
        {"max_reclaims": -1},
    )
    for bad in cases:
        with pytest.raises(pydantic.ValidationError):
            ServerSettings(**bad)


def test_database_urls() -> None:
    assert check_database_url("sqlite:///rel.db") == "sqlite:///rel.db"
    assert check_database_url("postgres://u@h/d") == "postgres://u@h/d"
    for bad in ("mysql://h/d", "jobagent.db", "postgresql:///d", "sqlite:/x.db"):
        with pytest.raises(ConfigError):
            check_database_url(bad)
    assert redact_url("postgresql://u:secret@h:5432/d") == "postgresql://u:***@h:5432/d"
    assert redact_url("postgresql://u@h/d") == "postgresql://u@h/d"


@pytest.mark.parametrize(
    ("requested", "config", "claim_next", "granted"),
    [
        (None, None, False, None),  # V1 claim by id: unleased
        (None, None, True, 60),  # claim-next: the server default
        (30, None, False, 30),
        (0, {"leaseSeconds": 30}, True, None),  # explicit 0: unleased everywhere
        (None, {"leaseSeconds": 30}, False, 30),
        (None, {"leaseSeconds": 30.7}, False, 30),
        (None, {"leaseSeconds": True}, False, None),  # not a number
        (None, {"leaseSeconds": "30"}, True, 60),
        (None, {"leaseSeconds": 0}, True, 60),
        (2, None, True, 5),  # clamped up
        (10**9, None, True, 3600),  # clamped down
    ],
)
def test_resolve_lease(
    requested: int | None, config: dict[str, object] | None, claim_next: bool, granted: int | None
) -> None:
    settings = ServerSettings(database="sqlite:///x.db")
    assert resolve_lease(settings, requested, config, claim_next=claim_next) == granted
