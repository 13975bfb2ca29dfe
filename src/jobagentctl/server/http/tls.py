"""HTTPS for ``server start``: the TLS context from a certificate and key, loaded again on SIGHUP.
Also the warnings about how the server is exposed (a key file others can read, plaintext off
loopback).

The handshake itself runs under the connection limits (``connections.py``): it counts against
the connection cap and must finish within the header timeout.
"""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from jobagentctl.errors import ConfigError

if TYPE_CHECKING:
    import ssl

    from jobagentctl.server.settings import ServerSettings

__all__ = ["exposure_warnings", "is_loopback", "reload_certificate", "server_context"]


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server-side TLS context: TLS 1.2 at least, HTTP/1.1 offered by ALPN, ``cert`` (PEM,
    the chain after the leaf) and its private ``key``. Unreadable or mismatched files are a
    :class:`ConfigError` that names them, before the server binds."""
    import ssl

    for what, path in (("certificate", cert), ("key", key)):
        if not path.is_file():
            raise ConfigError(f"TLS {what} file {path} does not exist or is not a file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    try:
        context.load_cert_chain(str(cert), str(key))
    except ssl.SSLError as exc:
        raise ConfigError(
            f"cannot use TLS certificate {cert} with key {key}: {exc.reason or exc} "
            "(PEM files expected; the key must be the certificate's, unencrypted)"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read TLS certificate or key: {exc.strerror}") from None
    return context


def reload_certificate(context: ssl.SSLContext, cert: Path, key: Path) -> None:
    """Serve ``cert`` and ``key`` anew from ``context``: handshakes from now on use them, open
    connections keep theirs. The pair is checked on a fresh context first, so files that do not
    work (:class:`ConfigError`) leave the certificate being served in place."""
    server_context(cert, key)
    context.load_cert_chain(str(cert), str(key))


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server on this machine (``localhost``, 127.0.0.0/8,
    ``::1``); ``0.0.0.0``, ``::`` and any other name or address are reachable from outside."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_warnings(settings: ServerSettings) -> list[str]:
    """What ``server start`` warns about before serving:

    - a TLS key file readable by group or others;
    - a non-loopback address served in plaintext without a TLS-terminating proxy named
      (``behind_proxy``). API keys and job secrets would cross the network in clear.
    """
    warnings: list[str] = []
    if settings.tls_key is not None:
        try:
            mode = settings.tls_key.stat().st_mode
        except OSError:
            mode = 0  # server_context says what is wrong with it
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            warnings.append(
                f"TLS key {settings.tls_key} is accessible by group/others (mode "
                f"{stat.S_IMODE(mode):04o}); run: chmod 600 {settings.tls_key}"
            )
    if not settings.tls and not settings.behind_proxy and not is_loopback(settings.host):
        warnings.append(
            f"serving plain HTTP on {settings.host}, which is reachable from other machines: "
            "API keys and job secrets (dispatchContext) cross the network in clear. Serve "
            "HTTPS with --tls-cert/--tls-key, or name the TLS-terminating proxy in front with "
            "--behind-proxy ADDR"
        )
    return warnings
