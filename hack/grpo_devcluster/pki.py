"""Certificates and keys for a secure, RBAC-enabled API server on loopback."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    """Paths of everything the components need; all under one directory."""

    root: Path

    @property
    def ca_cert(self) -> Path:
        return self.root / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.root / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.root / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.root / "apiserver.key"

    @property
    def admin_cert(self) -> Path:
        return self.root / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.root / "admin.key"

    @property
    def sa_key(self) -> Path:
        return self.root / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.root / "sa.pub"


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                          serialization.NoEncryption())
    )
    path.chmod(0o600)


def sign(subject: x509.Name, public_key, ca_key, issuer: x509.Name, *, is_ca: bool,
          usages: list, sans: list | None = None) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
    )
    if is_ca:
        builder = builder.add_extension(
            x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                          encipher_only=False, decipher_only=False), critical=True)
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def cert_name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def generate(root: Path, service_ip: str) -> Pki:
    """A CA, the API server's serving cert, an admin client cert and service-account signing keys."""
    root.mkdir(parents=True, exist_ok=True)
    pki = Pki(root)
    ca_key = new_key()
    ca_name = cert_name("grpo-devcluster-ca")
    ca = sign(ca_name, ca_key.public_key(), ca_key, ca_name, is_ca=True, usages=[])
    pki.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    _write_key(pki.ca_key, ca_key)

    serving_key = new_key()
    sans: list = [x509.DNSName(n) for n in (
        "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local")]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", service_ip)]
    serving = sign(cert_name("kube-apiserver"), serving_key.public_key(), ca_key, ca_name, is_ca=False,
                    usages=[ExtendedKeyUsageOID.SERVER_AUTH], sans=sans)
    pki.serving_cert.write_bytes(serving.public_bytes(serialization.Encoding.PEM))
    _write_key(pki.serving_key, serving_key)

    admin_key = new_key()
    admin = sign(cert_name("devcluster-admin", "system:masters"), admin_key.public_key(), ca_key, ca_name,
                  is_ca=False, usages=[ExtendedKeyUsageOID.CLIENT_AUTH])
    pki.admin_cert.write_bytes(admin.public_bytes(serialization.Encoding.PEM))
    _write_key(pki.admin_key, admin_key)

    # RSA, because every Kubernetes version accepts it for service-account token signing.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(pki.sa_key, sa_key)
    pki.sa_pub.write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return pki


def client_cert(pki: Pki, common_name: str, organization: str | None, file_stem: str) -> tuple[Path, Path]:
    """A client certificate signed by the cluster's CA (user `common_name`, group `organization`)."""
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    ca_name = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes()).subject
    key = new_key()
    cert = sign(cert_name(common_name, organization), key.public_key(), ca_key, ca_name, is_ca=False,
                 usages=[ExtendedKeyUsageOID.CLIENT_AUTH])
    cert_path, key_path = pki.root / f"{file_stem}.crt", pki.root / f"{file_stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key_path, key)
    return cert_path, key_path


def kubeconfig(pki: Pki, server: str, cert: tuple[Path, Path] | None = None, user: str = "devcluster-admin") -> dict:
    """A kubeconfig that authenticates with a client certificate (the admin's unless `cert` is given)."""
    cert_path, key_path = cert or (pki.admin_cert, pki.admin_key)
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "devcluster", "cluster": {
            "server": server, "certificate-authority": str(pki.ca_cert)}}],
        "users": [{"name": user, "user": {"client-certificate": str(cert_path), "client-key": str(key_path)}}],
        "contexts": [{"name": "devcluster", "context": {"cluster": "devcluster", "user": user}}],
        "current-context": "devcluster",
    }
