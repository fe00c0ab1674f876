"""Serving certificates for a cluster that speaks HTTPS: a self-signed CA and a server certificate it signs,
as kubeadm makes `ca.crt` and `apiserver.crt` (`cmd/kubeadm/app/phases/certs`). kubectl sends a bearer token
only over TLS (client-go `clientcmd/client_config.go` `DirectClientConfig.ClientConfig` reads the user's
credentials only when `IsConfigTransportTLS`), so a cluster that authorizes by token serves HTTPS for
kubectl; the CA goes into the kubeconfig (`certificate-authority-data`)."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class ServingCerts:
    """PEM bytes of the CA certificate, the server certificate and its key."""

    ca: bytes
    cert: bytes
    key: bytes

    def context(self, folder: Path) -> ssl.SSLContext:
        """A server SSL context (its chain and key written under `folder`: `load_cert_chain` reads files)."""
        folder.mkdir(parents=True, exist_ok=True)
        cert, key = folder / "apiserver.crt", folder / "apiserver.key"
        cert.write_bytes(self.cert)
        key.write_bytes(self.key)
        key.chmod(0o600)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        return context


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_serving_certs(host: str) -> ServingCerts:
    """A CA (`kubernetes`) and a server certificate for `host`, 127.0.0.1, `localhost` and
    `kubernetes.default.svc`, valid for a year."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("kubernetes"))
        .issuer_name(_name("kubernetes"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes.default.svc"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    try:
        address = ipaddress.ip_address(host)
        if str(address) != "127.0.0.1":
            names.append(x509.IPAddress(address))
    except ValueError:
        names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("kube-apiserver"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ServingCerts(
        ca=ca_cert.public_bytes(serialization.Encoding.PEM),
        cert=cert.public_bytes(serialization.Encoding.PEM),
        key=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
