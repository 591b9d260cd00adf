"""Certificates and kubeconfigs of a local control plane, made with ``cryptography`` (as envtest does in Go).

One CA signs the API server's serving certificate (loopback names and the in-cluster ``kubernetes`` Service
names) and every client certificate: the admin (``system:masters``), kube-controller-manager and
kube-scheduler (the users the API server's bootstrap RBAC grants their roles to). A separate key pair
signs ServiceAccount tokens (TokenRequest, projected ``kube-api-access-*`` volumes).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)
SERVICE_IP = "10.0.0.1"  # first address of --service-cluster-ip-range (launcher.SERVICE_CIDR)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: Any) -> bytes:
    return bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))


def _write(path: Path, data: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(data)
    path.chmod(mode)
    return path


class PKI:
    """Writes everything under ``directory`` (0700): ``ca.crt``, serving and client pairs, ``sa.key/pub``.
    :meth:`load` reopens one (to issue more client certificates for a running control plane)."""

    @classmethod
    def load(cls, directory: Path) -> PKI:
        self = cls.__new__(cls)
        self.dir = directory
        now = datetime.datetime.now(datetime.timezone.utc)
        self._not_before, self._not_after = now - datetime.timedelta(minutes=5), now + VALIDITY
        self.ca_cert, self.ca_key = directory / "ca.crt", directory / "ca.key"
        self.sa_key, self.sa_pub = directory / "sa.key", directory / "sa.pub"
        self._ca_cert = x509.load_pem_x509_certificate(self.ca_cert.read_bytes())
        key = serialization.load_pem_private_key(self.ca_key.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey), type(key)
        self._ca_key, self._ca_name = key, self._ca_cert.subject
        return self

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
        now = datetime.datetime.now(datetime.timezone.utc)
        self._not_before, self._not_after = now - datetime.timedelta(minutes=5), now + VALIDITY
        self._ca_key = _key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ansible-operator-control-plane-ca")])
        self._ca_name = name
        self._ca_cert = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(self._ca_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before).not_valid_after(self._not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(self._ca_key, hashes.SHA256()))
        self.ca_cert = _write(directory / "ca.crt", self._ca_cert.public_bytes(serialization.Encoding.PEM),
                              0o644)
        self.ca_key = _write(directory / "ca.key", _pem_key(self._ca_key))
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.sa_key = _write(directory / "sa.key", _pem_key(sa))
        self.sa_pub = _write(directory / "sa.pub", sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo), 0o644)

    def serving(self, name: str, hosts: list[str]) -> Pair:
        sans: list[x509.GeneralName] = []
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        return self._issue(name, name, [], ExtendedKeyUsageOID.SERVER_AUTH, sans)

    def client(self, name: str, user: str, groups: list[str]) -> Pair:
        return self._issue(name, user, groups, ExtendedKeyUsageOID.CLIENT_AUTH, [])

    def _issue(self, file: str, cn: str, orgs: list[str], usage: x509.ObjectIdentifier,
               sans: list[x509.GeneralName]) -> Pair:
        key = _key()
        subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
                            + [x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        builder = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(self._ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before).not_valid_after(self._not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        return Pair(_write(self.dir / f"{file}.crt", cert.public_bytes(serialization.Encoding.PEM), 0o644),
                    _write(self.dir / f"{file}.key", _pem_key(key)))

    def kubeconfig(self, path: Path, server: str, pair: Pair, user: str = "admin",
                   context: str = "ansible-operator-control-plane") -> Path:
        """A kubeconfig for ``server`` with the CA and the client pair embedded (self-contained: copy it
        anywhere)."""
        def b64(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode()

        config = {
            "apiVersion": "v1", "kind": "Config", "preferences": {}, "current-context": context,
            "clusters": [{"name": context, "cluster": {"server": server,
                                                       "certificate-authority-data": b64(self.ca_cert)}}],
            "users": [{"name": user, "user": {"client-certificate-data": b64(pair.cert),
                                              "client-key-data": b64(pair.key)}}],
            "contexts": [{"name": context, "context": {"cluster": context, "user": user}}],
        }
        return _write(path, yaml.safe_dump(config, sort_keys=False).encode())
