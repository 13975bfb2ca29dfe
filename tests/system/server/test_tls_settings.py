"""HTTPS settings of ``server start``: the TLS pair, the warnings about exposure, the proxy."""

from __future__ import annotations

import os
import signal
import ssl
import urllib.error
from pathlib import Path

import pytest

from jobagentctl.errors import ConfigError
from jobagentctl.server.http.runner import NOTHING_TO_RELOAD, _proxy_options
from jobagentctl.server.http.tls import exposure_warnings, is_loopback, server_context
from jobagentctl.server.settings import ServerSettings
from tests.fixtures.live_server import LiveServerFactory
from tests.fixtures.tls import make_tls_files
from tests.fixtures.waiting import wait_until

PLAINTEXT = "serving plain HTTP on"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("JOBAGENTCTL_SERVER_"):
            monkeypatch.delenv(name)


def _settings(**values: object) -> ServerSettings:
    return ServerSettings(database="sqlite:///unused.db", **values)  # type: ignore[arg-type]


def test_tls_settings_from_the_environment_and_in_pairs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("JOBAGENTCTL_SERVER_TLS_CERT", "/etc/jobagentctl/server.pem")
    monkeypatch.setenv("JOBAGENTCTL_SERVER_TLS_KEY", "/etc/jobagentctl/server.key")
    monkeypatch.setenv("JOBAGENTCTL_SERVER_BEHIND_PROXY", " 10.0.0.5 , 10.0.0.6,")
    settings = ServerSettings()
    assert settings.tls and settings.tls_cert == Path("/etc/jobagentctl/server.pem")
    assert settings.proxy_addresses == ["10.0.0.5", "10.0.0.6"]
    monkeypatch.delenv("JOBAGENTCTL_SERVER_TLS_KEY")
    with pytest.raises(ValueError, match="tls_cert and tls_key go together"):
        ServerSettings()


def test_the_context_wants_tls_1_2_and_names_unusable_files(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path)
    context = server_context(files.cert, files.key)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(ConfigError, match=r"TLS key file .*missing\.key does not exist"):
        server_context(files.cert, tmp_path / "missing.key")
    other = make_tls_files(tmp_path / "other")
    with pytest.raises(ConfigError, match=r"cannot use TLS certificate .* with key"):
        server_context(files.cert, other.key)  # not this certificate's key


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.1.2.3", False),
        ("jobs.example.com", False),
    ],
)
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_exposure_warnings(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path)
    assert exposure_warnings(_settings(host="127.0.0.1")) == []
    [plain] = exposure_warnings(_settings(host="0.0.0.0"))
    assert plain.startswith(f"{PLAINTEXT} 0.0.0.0") and "--behind-proxy" in plain
    assert exposure_warnings(_settings(host="0.0.0.0", behind_proxy="10.0.0.5")) == []
    assert exposure_warnings(_settings(host="0.0.0.0", **files.settings())) == []
    files.key.chmod(0o640)
    [key] = exposure_warnings(_settings(host="0.0.0.0", **files.settings()))
    assert key == (
        f"TLS key {files.key} is accessible by group/others (mode 0640); run: chmod 600 {files.key}"
    )


def test_forwarded_headers_are_trusted_only_from_the_named_proxies() -> None:
    assert _proxy_options(_settings()) == {"proxy_headers": False}
    assert _proxy_options(_settings(behind_proxy="10.0.0.5,10.0.0.0/24")) == {
        "proxy_headers": True,
        "forwarded_allow_ips": ["10.0.0.5", "10.0.0.0/24"],
    }


def test_a_plaintext_bind_off_loopback_is_warned_about_once_at_start(tmp_path: Path) -> None:
    with LiveServerFactory(f"sqlite:///{tmp_path / 'plain.db'}", tmp_path) as servers:
        server = servers(host="0.0.0.0")
        assert server.log().count(PLAINTEXT) == 1, server.log()


def test_sighup_serves_a_renewed_certificate_and_keeps_the_old_one_on_bad_files(
    tmp_path: Path,
) -> None:
    old = make_tls_files(tmp_path / "old")
    with LiveServerFactory(f"sqlite:///{tmp_path / 'tls.db'}", tmp_path) as servers:
        server = servers(ca_bundle=old.ca, **old.settings())
        assert server.proc is not None
        renewed = make_tls_files(tmp_path / "new")  # another CA: only it trusts the new one
        old.key.write_bytes(renewed.key.read_bytes())  # a key that is not the certificate's
        server.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "TLS certificate not reloaded" in server.log(), what="the refusal")
        assert server.request("GET", "/healthz", api_key=None)[0] == 200  # the old one, served

        old.cert.write_bytes(renewed.cert.read_bytes())
        server.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "TLS certificate reloaded" in server.log(), what="the reload")
        server.ca_bundle = renewed.ca
        assert server.request("GET", "/healthz", api_key=None)[0] == 200
        server.ca_bundle = old.ca
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            server.request("GET", "/healthz", api_key=None)


def test_sighup_keeps_a_plain_http_server_serving_and_says_nothing_was_reloaded(
    tmp_path: Path,
) -> None:
    """Without a handler SIGHUP's default action ends the process (the reload operators.md
    suggests would stop the service): a plain-HTTP server logs one line and keeps serving."""
    with LiveServerFactory(f"sqlite:///{tmp_path / 'plain.db'}", tmp_path) as servers:
        server = servers()
        proc = server.proc
        assert proc is not None
        for count in (1, 2):
            proc.send_signal(signal.SIGHUP)

            def answered(count: int = count) -> bool:
                return server.log().count(NOTHING_TO_RELOAD) == count or proc.poll() is not None

            wait_until(answered, what=f"SIGHUP's line, {count} time(s), or the server's end")
            assert proc.poll() is None, f"SIGHUP ended the server: {server.log()}"
            assert server.log().count(NOTHING_TO_RELOAD) == count
            assert server.request("GET", "/healthz", api_key=None)[0] == 200
        assert "TLS certificate" not in server.log()
        assert server.stop() == 0
