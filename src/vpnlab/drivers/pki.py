"""A throw-away PKI per tunnel: a CA, a server and a client certificate.

ECDSA P-256 with SHA-256 is FIPS 140-approved and quick to generate, so the
same PKI serves both profiles. Everything lands in the run's secrets directory,
mode 0600, and is removed with the run.

Made in-process with `cryptography` rather than with five `openssl` commands: under the VM's
software emulation those took 3 s of every repetition (a fresh tunnel each).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..files import write_secret
from ..tools import Tool

OPENSSL = Tool("openssl", "openssl", ("openssl", "version"))

VALID = datetime.timedelta(days=2)
CLOCK_SLACK = datetime.timedelta(minutes=5)  # a guest's clock may trail the host's a little


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(subject: str, key, issuer: str, issuer_key, extensions) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - CLOCK_SLACK).not_valid_after(now + VALID)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                              critical=False))
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(issuer_key, hashes.SHA256())


def _usage(**allowed) -> x509.KeyUsage:
    names = ("digital_signature", "content_commitment", "key_encipherment", "data_encipherment",
             "key_agreement", "key_cert_sign", "crl_sign")
    return x509.KeyUsage(**{n: allowed.get(n, False) for n in names}, encipher_only=False, decipher_only=False)


def _write(path: Path, key=None, cert: x509.Certificate | None = None) -> Path:
    if key is not None:
        data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())
    else:
        data = cert.public_bytes(serialization.Encoding.PEM)
    write_secret(path, data.decode())
    return path


def make_pki(folder: Path, server_ip: str, prefix: str) -> Pki:
    """CA + server cert (with the server's IP as subject alternative name) + client cert."""
    folder.mkdir(mode=0o700, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("vpnlab test CA", ca_key, "vpnlab test CA", ca_key, [
        (x509.BasicConstraints(ca=True, path_length=None), True),
        (_usage(key_cert_sign=True, crl_sign=True), True)])
    paths = {"ca": _write(folder / f"{prefix}ca.pem", cert=ca)}
    for role, purpose in (("server", ExtendedKeyUsageOID.SERVER_AUTH), ("client", ExtendedKeyUsageOID.CLIENT_AUTH)):
        key = ec.generate_private_key(ec.SECP256R1())
        extensions = [(x509.BasicConstraints(ca=False, path_length=None), False),
                      (_usage(digital_signature=True, key_agreement=True), True),
                      (x509.ExtendedKeyUsage([purpose]), False)]
        if role == "server":
            extensions.append((x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(server_ip))]), False))
        cert = _certificate(f"vpnlab-{role}", key, "vpnlab test CA", ca_key, extensions)
        paths[f"{role}_key"] = _write(folder / f"{prefix}{role}.key", key=key)
        paths[f"{role}_cert"] = _write(folder / f"{prefix}{role}.pem", cert=cert)
    return Pki(paths["ca"], paths["server_cert"], paths["server_key"], paths["client_cert"], paths["client_key"])
