"""Connecting to a Dask scheduler: addresses, TLS, and one line for each way a connection fails.

Trust: a Dask scheduler runs whatever its clients send, and the client unpickles what workers return,
so everyone who can reach a plain ``tcp://`` scheduler can run code on the workers *and* in the client.
Connecting to a ``tcp://`` address that is not loopback prints one warning line saying so
(:func:`warn_plain_tcp`); ``tls://`` addresses need the three credentials of :class:`TLSConfig`, and
the handshake is tried here first so that a failure is one line naming its cause.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from ..errors import ClusterError

@dataclass(frozen=True)
class TLSConfig:
    ca_file: str
    cert: str
    key: str

def connect(address: str, tls: TLSConfig | None):
    from distributed import Client

    if "://" not in address:
        raise ClusterError(f"cluster address '{address}' needs a scheme; use tcp://HOST:PORT or tls://HOST:PORT")
    security = None
    if address.startswith("tls://"):
        if tls is None:
            raise ClusterError(
                f"'{address}' needs TLS credentials; pass --tls-ca-file, --tls-cert and --tls-key"
            )
        security = _security(tls)
        _check_tls_handshake(address, tls)
    elif tls is not None:
        raise ClusterError(f"TLS credentials given but '{address}' is not a tls:// address; use tls://HOST:PORT")
    else:
        warn_plain_tcp(address)
    try:
        client = Client(address, security=security, timeout="10s", set_as_default=False)
    except TypeError as exc:  # distributed's error for a TLS client without a certificate
        raise ClusterError(f"TLS connection to {address} failed ({exc}); check --tls-cert and --tls-key") from exc
    except (OSError, TimeoutError, ValueError) as exc:  # ValueError: tornado's "IOStream is not idle"
        raise ClusterError(_unreachable(address, exc)) from exc
    if not client.scheduler_info().get("workers"):
        try:
            client.wait_for_workers(1, timeout=10)
        except TimeoutError as exc:
            client.close()
            raise ClusterError(f"the scheduler at {address} has no workers; start one with 'dask worker {address}'") from exc
    return client

def _security(tls: TLSConfig):
    """A ``Security`` for ``tls``, after checking each file exists and the certificate and key load."""
    import ssl

    from distributed.security import Security

    for flag, path in (("--tls-ca-file", tls.ca_file), ("--tls-cert", tls.cert), ("--tls-key", tls.key)):
        if not os.path.isfile(path):
            raise ClusterError(f"{flag} '{path}' does not exist or is not a file; give the path of a PEM file")
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    try:
        context.load_verify_locations(cafile=tls.ca_file)
    except (ssl.SSLError, ValueError) as exc:
        raise ClusterError(
            f"--tls-ca-file '{tls.ca_file}' is not a PEM CA certificate ({_ssl_reason(exc)}); give the CA that signed the scheduler's certificate"
        ) from exc
    try:
        context.load_cert_chain(tls.cert, tls.key)
    except (ssl.SSLError, ValueError) as exc:
        raise ClusterError(
            f"cannot load the client certificate '{tls.cert}' with key '{tls.key}' ({_ssl_reason(exc)});"
            " check that --tls-key is the unencrypted PEM private key of --tls-cert"
        ) from exc
    return Security(tls_ca_file=tls.ca_file, tls_client_cert=tls.cert, tls_client_key=tls.key, require_encryption=True)

def _check_tls_handshake(address: str, tls: TLSConfig, timeout: float = 10.0) -> None:
    """Shake hands with the scheduler before Dask does, and say in one line why it failed.

    Dask's own attempt at a plain ``tcp://`` scheduler fails in one of several ways depending on timing
    (tornado's "IOStream is not idle", a 20 s timeout, a traceback from the half-made client's
    ``__del__``), so the TLS handshake is tried here first with the same settings as Dask's
    ``Security`` (the CA verifies the scheduler's certificate; host names are not checked).
    """
    import socket
    import ssl

    _, host, port = _split_address(address)
    try:
        raw = socket.create_connection((host, int(port)), timeout=timeout)
    except (OSError, ValueError) as exc:
        raise ClusterError(_unreachable(address, exc)) from exc
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=tls.ca_file)
    context.check_hostname = False
    context.load_cert_chain(tls.cert, tls.key)
    try:
        with context.wrap_socket(raw, server_hostname=host):
            pass
    except OSError as exc:  # ssl.SSLError, a reset or a timeout in the middle of the handshake
        raise ClusterError(_tls_failed(address, _ssl_reason(exc))) from exc
    finally:
        raw.close()

def _split_address(address: str) -> tuple[str, str, str]:
    """``tls://[::1]:8786`` -> ``("tls", "::1", "8786")``: scheme, host without brackets, port text."""
    scheme, _, rest = address.partition("://")
    host, _, port = rest.rpartition(":")
    return scheme, host.strip("[]"), port

def _tls_failed(address: str, reason: str) -> str:
    return (
        f"{address} accepts connections but the TLS handshake failed ({reason}); the scheduler may be a"
        " plain tcp:// one (use tcp://), or its certificate is not signed by --tls-ca-file"
    )

def _ssl_reason(exc: BaseException) -> str:
    return getattr(exc, "reason", None) or " ".join(str(exc).split())[:200] or type(exc).__name__

def _unreachable(address: str, exc: BaseException) -> str:
    """Why a connection failed: nothing listening, or a listener that speaks the other protocol."""
    scheme, host, port = _split_address(address)
    listening = _port_open(host, port)
    reason = " ".join(str(exc).split())[:200] or type(exc).__name__
    if listening and scheme == "tls":
        return _tls_failed(address, reason)
    if listening and scheme == "tcp":
        return (
            f"{address} accepts connections but does not answer as a tcp:// Dask scheduler ({reason});"
            " if it was started with --protocol tls, connect with tls:// and --tls-ca-file/--tls-cert/--tls-key"
        )
    return f"cannot reach the Dask scheduler at {address} ({reason}); start it with 'dask scheduler' or fix the address"

def _port_open(host: str, port: str) -> bool:
    import socket

    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except (OSError, ValueError):
        return False

_WARNED: set[str] = set()

def is_loopback(host: str) -> bool:
    import ipaddress

    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

def warn_plain_tcp(address: str) -> bool:
    """One stderr line, once per process and address, when ``address`` is plain TCP beyond loopback."""
    scheme, _, rest = address.partition("://")
    host = rest.rpartition(":")[0] or rest
    if scheme != "tcp" or is_loopback(host) or address in _WARNED:
        return False
    _WARNED.add(address)
    sys.stderr.write(
        f"warning: {address} is plain tcp://: anyone who can reach it can run code on its workers and in"
        " this process; use tls:// (see README, 'Trust')\n"
    )
    return True
