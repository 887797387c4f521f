"""A TLS-only cluster on 127.0.0.1 (deploy/tls-cluster.sh's command lines) and the CLI's TLS flags."""

from __future__ import annotations

import datetime as dt
import ipaddress
import time
from pathlib import Path

import pytest

from calengine.testing.cluster import start_dask_scheduler, start_dask_worker, stop_processes
from cli_helpers import assert_one_line_error

cryptography = pytest.importorskip("cryptography")


def _key():
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _write(path: Path, cert, key) -> None:
    from cryptography.hazmat.primitives import serialization

    path.with_suffix(".pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path.with_suffix(".key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def _certificates(folder: Path, ips: tuple[str, ...] = ("127.0.0.1",)) -> dict[str, Path]:
    """A throwaway CA, a certificate for the scheduler/workers and one for the client, valid for
    localhost and the addresses ``ips``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.timezone.utc)
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "calengine test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    _write(folder / "ca", ca, ca_key)
    for name in ("cluster", "client"):
        key = _key()
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips)]),
                           False)
            .sign(ca_key, hashes.SHA256())
        )
        _write(folder / name, cert, key)
    return {n: folder / n for n in ("ca", "cluster", "client")}


@pytest.mark.cluster
def test_fit_on_a_tls_cluster_and_refuse_without_credentials(tmp_path, cli):
    certs = _certificates(tmp_path)
    tls = ["--tls-ca-file", str(certs["ca"].with_suffix(".pem")), "--tls-cert",
           str(certs["cluster"].with_suffix(".pem")), "--tls-key", str(certs["cluster"].with_suffix(".key"))]
    address, scheduler = start_dask_scheduler(args=tls, protocol="tls")
    procs = [scheduler]
    try:
        procs.append(start_dask_worker(address, 1, memory_limit=None, args=tls))
        client_tls = ["--tls-ca-file", certs["ca"].with_suffix(".pem"), "--tls-cert",
                      certs["client"].with_suffix(".pem"), "--tls-key", certs["client"].with_suffix(".key")]
        deadline = time.monotonic() + 90
        while True:
            r = cli("fit", "data/pima.parquet", "--target", "class", "--method", "sigmoid", "--cluster", address,
                    *client_tls, "--output", tmp_path / "m")
            if r.returncode == 0 or time.monotonic() > deadline or "no workers" not in r.stderr:
                break
            time.sleep(2)
        assert r.returncode == 0, r
        assert_one_line_error(
            cli("fit", "data/pima.parquet", "--target", "class", "--cluster", address, "--output", tmp_path / "n"),
            "--tls-ca-file",
        )
        assert_one_line_error(
            cli("fit", "data/pima.parquet", "--target", "class", "--cluster", address, "--tls-ca-file",
                certs["ca"].with_suffix(".pem"), "--output", tmp_path / "n"),
            "TLS needs all of",
        )
        assert not (tmp_path / "n").exists()
    finally:
        stop_processes(procs)
