"""Test and bench certificates: a small CA (Python ``cryptography``, EC P-256).

:class:`Authority` makes a CA and issues certificates with a commonName and
subjectAltNames (DNS, IP) in a directory, named like ``ovs-pki`` names them
(``NAME-cert.pem``, ``NAME-privkey.pem``; the CA's ``cacert.pem``): the
emulator's switches (one certificate each, thousands per second), the
controller's in the benches, etcd's servers and clients. (The real ``ovs-pki`` for the Open vSwitch test
is ``tests/ovs_pki.py``.)

A harness like the rest of :mod:`hpcfabric.emu`: nothing in the product imports it.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path


class Authority:
    """A CA in ``directory`` (``cacert.pem``, ``cakey.pem``), named ``name``; :meth:`issue` signs certificates."""

    def __init__(self, directory: str | Path, name: str = "hpcfabric test CA") -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (x509.CertificateBuilder().subject_name(self.name).issuer_name(self.name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=30))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                                  data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                                  crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.ca = self.dir / "cacert.pem"
        self.ca.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        (self.dir / "cakey.pem").write_bytes(self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))

    def issue(self, name: str, *, dns: tuple[str, ...] = (), ips: tuple[str, ...] = (),
              directory: str | Path | None = None, common_name: bool = True) -> tuple[Path, Path]:
        """A certificate with commonName ``name`` (and the given subjectAltNames), usable as TLS client and
        server; returns (certificate, private key) paths, ``NAME-cert.pem`` / ``NAME-privkey.pem``.
        ``common_name=False``: the subject is ``O=hpcfabric, OU=NAME`` (etcd 3.4's gateway refuses client
        certificates with a commonName once auth is on)."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        subject = [x509.NameAttribute(NameOID.COMMON_NAME, name)] if common_name else [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "hpcfabric"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, name)]
        builder = (x509.CertificateBuilder().subject_name(x509.Name(subject))
                   .issuer_name(self.name).public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=30))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                         ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        alt = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if alt:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        out = Path(directory) if directory is not None else self.dir
        out.mkdir(parents=True, exist_ok=True)
        cert_path, key_path = out / f"{name}-cert.pem", out / f"{name}-privkey.pem"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        key_path.chmod(0o600)
        return cert_path, key_path
