"""What the CLI says when a server's certificate is refused, and which CA settings it trusts.

The failures happen in the handshake, before any request, so the server here is a small TLS
listener that answers every request with an empty page of agents (no database involved). The
CLI runs as a real process: the exit code a script sees, one line on stderr, no traceback.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from tests.fixtures.cli import Ran, clean_env, run_cli
from tests.fixtures.tls import TlsFiles, make_tls_files

_PAGE = b'{"items": [], "total": 0, "limit": 50, "offset": 0}'
_ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"content-length: " + str(len(_PAGE)).encode() + b"\r\n\r\n" + _PAGE
)
_WORKSPACE = "00000000-0000-4000-8000-000000000001"


@contextlib.contextmanager
def tls_listener(files: TlsFiles) -> Iterator[str]:
    """``https://127.0.0.1:PORT`` served with ``files``' certificate until the block ends."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(files.cert), str(files.key))
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(30)
            # ssl.SSLError (an OSError): the client refused the certificate.
            with (
                conn,
                contextlib.suppress(OSError),
                context.wrap_socket(conn, server_side=True) as tls,
            ):
                if tls.recv(65536):
                    tls.sendall(_ANSWER)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(30)
        listener.close()


def _agents_list(url: str, tmp_path: Path, *options: str, **env: str) -> Ran:
    """``jobagentctl [OPTIONS] agents list`` against ``url``, ``env`` added to its own."""
    return run_cli(
        *options,
        "agents",
        "list",
        env=clean_env(
            JOBAGENTCTL_URL=url,
            JOBAGENTCTL_WORKSPACE=_WORKSPACE,
            JOBAGENTCTL_API_KEY="jak_test.secret",
            XDG_CONFIG_HOME=str(tmp_path / "config"),
            **env,
        ),
    )


def _one_error_line(ran: Ran) -> str:
    assert ran.returncode == 3, (ran.returncode, ran.stderr)
    assert "Traceback" not in ran.stderr
    [line] = ran.stderr.strip().splitlines()
    return line


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("untrusted", "issued by an authority that is not trusted (unable to get local issuer"),
        ("expired", "it has expired; the server needs a renewed certificate"),
        ("wrong-name", "it is for another name (IP address mismatch, certificate is not valid"),
    ],
)
def test_a_refused_certificate_is_one_line_naming_host_and_reason(
    tmp_path: Path, case: str, reason: str
) -> None:
    ca = trustme.CA()
    names = ("jobs.example.com",) if case == "wrong-name" else ("127.0.0.1",)
    served = make_tls_files(tmp_path / "server", *names, ca=ca, expired=case == "expired")
    # "untrusted": the client trusts another CA than the one that issued the certificate.
    trusted = make_tls_files(tmp_path / "other").ca if case == "untrusted" else served.ca
    with tls_listener(served) as url:
        line = _one_error_line(_agents_list(url, tmp_path, JOBAGENTCTL_CA_BUNDLE=str(trusted)))
    assert line.startswith(f"error: TLS certificate of the server at {url} refused: {reason}")


def test_the_ca_bundle_comes_from_flag_env_profile_or_ssl_cert_file(tmp_path: Path) -> None:
    served = make_tls_files(tmp_path / "server")
    wrong = make_tls_files(tmp_path / "other").ca
    config = tmp_path / "config" / "jobagentctl"
    config.mkdir(parents=True)
    (config / "ca.pem").write_bytes(served.ca.read_bytes())
    # Relative to the config file, as api_key_file is.
    (config / "config.toml").write_text(
        'default_profile = "p"\n[profiles.p]\nca_bundle = "ca.pem"\n', encoding="utf-8"
    )
    (config / "config.toml").chmod(0o600)
    with tls_listener(served) as url:
        assert _agents_list(url, tmp_path).returncode == 0  # the profile's
        ran = _agents_list(url, tmp_path, JOBAGENTCTL_CA_BUNDLE=str(wrong))
        assert "not trusted" in _one_error_line(ran)  # the environment beats the profile
        (config / "config.toml").unlink()
        assert _agents_list(url, tmp_path, SSL_CERT_FILE=str(served.ca)).returncode == 0
        ran = _agents_list(
            url, tmp_path, SSL_CERT_FILE=str(served.ca), JOBAGENTCTL_CA_BUNDLE=str(wrong)
        )
        assert "not trusted" in _one_error_line(ran)  # ours beats SSL_CERT_FILE
        assert "not trusted" in _one_error_line(_agents_list(url, tmp_path))  # certifi's only
        flag = _agents_list(
            url, tmp_path, "--ca-bundle", str(served.ca), JOBAGENTCTL_CA_BUNDLE=str(wrong)
        )
        assert flag.returncode == 0, flag.stderr  # the flag beats everything


def test_an_unusable_ca_bundle_is_a_configuration_error(tmp_path: Path) -> None:
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello\n")
    for bundle, why in ((tmp_path / "missing.pem", "No such file"), (not_pem, "NO_CERTIFICATE")):
        ran = _agents_list("https://127.0.0.1:9", tmp_path, JOBAGENTCTL_CA_BUNDLE=str(bundle))
        assert ran.returncode == 2, ran.stderr
        assert ran.stderr.strip() == f"error: cannot use the CA bundle {bundle}: " + (
            "No such file or directory" if why == "No such file" else "NO_CERTIFICATE_OR_CRL_FOUND"
        )
