"""A failed TLS handshake becomes one TlsError (exit 3), which `run` does not retry."""

from __future__ import annotations

import ssl

import httpx

from jobagentctl.client._errors import translate
from jobagentctl.errors import ServerUnavailable, TlsError
from jobagentctl.supervisor.protocol import is_transient


def _connect_error(cause: BaseException) -> httpx.ConnectError:
    exc = httpx.ConnectError("handshake", request=httpx.Request("GET", "https://jobs:8443/api"))
    exc.__cause__ = cause
    return exc


def test_a_refused_certificate_is_a_tls_error_that_is_not_retried() -> None:
    cause = ssl.SSLCertVerificationError(1, "certificate verify failed")
    cause.verify_code, cause.verify_message = 10, "certificate has expired"
    error = translate(_connect_error(cause))
    assert isinstance(error, TlsError) and error.exit_code == 3
    assert error.message == (
        "TLS certificate of the server at https://jobs:8443 refused: it has expired; the "
        "server needs a renewed certificate"
    )
    assert not is_transient(error)


def test_a_plain_http_server_behind_an_https_url_is_named() -> None:
    cause = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    cause.reason = "WRONG_VERSION_NUMBER"
    error = translate(_connect_error(cause))
    assert isinstance(error, TlsError)
    assert error.message.endswith("the server does not speak TLS there (an http:// URL?)")


def test_other_connect_errors_stay_server_unavailable() -> None:
    error = translate(_connect_error(ConnectionRefusedError(111, "refused")))
    assert type(error) is ServerUnavailable and is_transient(error)
