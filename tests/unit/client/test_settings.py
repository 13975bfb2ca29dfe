"""ClientSettings: flag > env > ctrlplane env > profile, profiles, URLs, the key as a secret."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobagentctl.errors import ConfigError
from jobagentctl.settings import ClientSettings, config_path, normalize_url
from tests.fixtures.wire import WORKSPACE

OTHER_WS = "99999999-9999-4999-8999-999999999999"


def write_config(path: Path, text: str, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chmod(path, mode)
    return path


@pytest.fixture
def config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    path = tmp_path / "xdg-config" / "jobagentctl" / "config.toml"
    write_config(
        path,
        f"""
default_profile = "local"

[profiles.local]
url = "http://127.0.0.1:8080/api"
workspace = "{WORKSPACE}"
api_key = "from.file"
lease_seconds = 30

[profiles.ci]
url = "https://ci.example.com/"
api_key_file = "ci.key"
""",
    )
    write_config(path.parent / "ci.key", "  ci.secret\n")
    return path


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://h:8080", "http://h:8080"),
        ("http://h:8080/", "http://h:8080"),
        ("http://h:8080/api", "http://h:8080"),
        ("http://h:8080/api/", "http://h:8080"),
        ("https://h/prefix/api", "https://h/prefix"),
        (" https://h ", "https://h"),
    ],
)
def test_url_is_stored_without_api(given: str, expected: str) -> None:
    assert normalize_url(given) == expected
    assert ClientSettings.load(url=given).url == expected


@pytest.mark.parametrize("bad", ["h:8080", "ftp://h", "http://", "/api"])
def test_bad_url_is_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="url"):
        ClientSettings.load(url=bad)


def test_defaults_without_any_source() -> None:
    settings = ClientSettings.load()
    assert settings.url is None
    assert settings.api_key is None
    assert settings.workspace is None
    assert settings.lease_seconds == 60
    assert settings.timeout == 10.0
    assert settings.profile is None


def test_default_profile_is_read(config: Path) -> None:
    settings = ClientSettings.load()
    assert settings.profile == "local"
    assert settings.url == "http://127.0.0.1:8080"
    assert settings.workspace == WORKSPACE
    assert settings.api_key_value() == "from.file"
    assert settings.lease_seconds == 30


def test_profile_flag_and_key_file_relative_to_config(config: Path) -> None:
    settings = ClientSettings.load(profile="ci")
    assert settings.url == "https://ci.example.com"
    assert settings.api_key_value() == "ci.secret"
    assert settings.workspace is None


def test_profile_from_env(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBAGENTCTL_PROFILE", "ci")
    assert ClientSettings.load().profile == "ci"
    # The flag beats the variable.
    assert ClientSettings.load(profile="local").profile == "local"


def test_unknown_profile_is_a_config_error(config: Path) -> None:
    with pytest.raises(ConfigError, match=r"profile 'nope' is not in .*profiles: ci, local"):
        ClientSettings.load(profile="nope")


def test_profile_without_config_file_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        ClientSettings.load(profile="local")


def test_precedence_flag_env_ctrlplane_profile(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CTRLPLANE_URL", "http://ctrlplane:3000/api")
    monkeypatch.setenv("CTRLPLANE_API_KEY", "cp.key")
    monkeypatch.setenv("CTRLPLANE_WORKSPACE", OTHER_WS)
    settings = ClientSettings.load()
    assert settings.url == "http://ctrlplane:3000"
    assert settings.api_key_value() == "cp.key"
    assert str(settings.workspace) == OTHER_WS
    assert settings.lease_seconds == 30  # only the profile sets it

    monkeypatch.setenv("JOBAGENTCTL_URL", "http://env:1")
    monkeypatch.setenv("JOBAGENTCTL_API_KEY", "env.key")
    monkeypatch.setenv("JOBAGENTCTL_LEASE_SECONDS", "90")
    settings = ClientSettings.load()
    assert settings.url == "http://env:1"
    assert settings.api_key_value() == "env.key"
    assert settings.lease_seconds == 90

    settings = ClientSettings.load(url="http://flag:2/api", lease_seconds=5)
    assert settings.url == "http://flag:2"
    assert settings.lease_seconds == 5


def test_key_file_flag_beats_env_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBAGENTCTL_API_KEY", "env.key")
    key = write_config(tmp_path / "k", "flag.key\n")
    assert ClientSettings.load(api_key_file=key).api_key_value() == "flag.key"


def test_key_file_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBAGENTCTL_API_KEY_FILE", str(write_config(tmp_path / "k", " a.b \n")))
    monkeypatch.setenv("CTRLPLANE_API_KEY", "cp.key")
    assert ClientSettings.load().api_key_value() == "a.b"


def test_key_and_key_file_at_one_level_is_ambiguous(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBAGENTCTL_API_KEY", "a.b")
    monkeypatch.setenv("JOBAGENTCTL_API_KEY_FILE", str(write_config(tmp_path / "k", "c.d")))
    with pytest.raises(ConfigError, match="both"):
        ClientSettings.load()


@pytest.mark.parametrize("content", ["", "   \n"])
def test_empty_key_file_is_a_config_error(tmp_path: Path, content: str) -> None:
    with pytest.raises(ConfigError, match="empty"):
        ClientSettings.load(api_key_file=write_config(tmp_path / "k", content))


def test_missing_key_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the API key file"):
        ClientSettings.load(api_key_file=tmp_path / "absent")


def test_key_never_in_repr_or_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBAGENTCTL_API_KEY", "top.secret")
    settings = ClientSettings.load()
    assert "top.secret" not in repr(settings)
    assert "top.secret" not in str(settings)
    assert "top.secret" not in settings.model_dump_json()
    monkeypatch.setenv("JOBAGENTCTL_WORKSPACE", "Not a UUID nor a slug")
    with pytest.raises(ConfigError) as caught:
        ClientSettings.load()
    assert "top.secret" not in str(caught.value)
    assert "workspace" in str(caught.value)


def test_empty_variables_count_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    # `claim -o env` on an unleased claim exports JOBAGENTCTL_LEASE_SECONDS=''.
    monkeypatch.setenv("JOBAGENTCTL_LEASE_SECONDS", "")
    monkeypatch.setenv("JOBAGENTCTL_URL", "")
    settings = ClientSettings.load()
    assert settings.lease_seconds == 60
    assert settings.url is None


def test_config_readable_by_others_warns(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ClientSettings.load()
    assert capsys.readouterr().err == ""
    os.chmod(config, 0o644)
    ClientSettings.load()
    err = capsys.readouterr().err
    assert "accessible by group/others (mode 0644)" in err
    assert f"chmod 600 {config}" in err


def test_jobagentctl_config_env_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(tmp_path / "elsewhere.toml", '[profiles.x]\nurl = "http://x:1"\n')
    monkeypatch.setenv("JOBAGENTCTL_CONFIG", str(path))
    assert config_path() == path
    assert ClientSettings.load(profile="x").url == "http://x:1"
    # No default_profile: the file is read, but no profile applies.
    assert ClientSettings.load().url is None


def test_unknown_profile_keys_warn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(tmp_path / "c.toml", '[profiles.x]\nurl = "http://x:1"\nuril = "typo"\n')
    monkeypatch.setenv("JOBAGENTCTL_CONFIG", str(path))
    ClientSettings.load(profile="x")
    assert "unknown keys ignored: uril" in capsys.readouterr().err


def test_invalid_toml_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBAGENTCTL_CONFIG", str(write_config(tmp_path / "c.toml", "[oops")))
    with pytest.raises(ConfigError, match="not valid TOML"):
        ClientSettings.load()


@pytest.mark.parametrize("slug", ["abc", "team-a", "-lead", "a" * 50, "0-9"])
def test_workspace_slugs_as_ctrlplane_allows_them(
    monkeypatch: pytest.MonkeyPatch, slug: str
) -> None:
    """ctrlplane's Workspace.slug: ^[a-z0-9-]+$, 3-50 characters (our server's rule too)."""
    monkeypatch.setenv("JOBAGENTCTL_WORKSPACE", slug)
    assert ClientSettings.load().workspace == slug


@pytest.mark.parametrize("slug", ["ab", "team.a", "under_score", "Upper", "a" * 51])
def test_other_workspace_slugs_are_config_errors(
    monkeypatch: pytest.MonkeyPatch, slug: str
) -> None:
    monkeypatch.setenv("JOBAGENTCTL_WORKSPACE", slug)
    with pytest.raises(ConfigError, match="3-50 lowercase letters, digits and '-'"):
        ClientSettings.load()
