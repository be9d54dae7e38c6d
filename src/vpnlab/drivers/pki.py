"""A throw-away PKI per tunnel: a CA, a server and a client certificate.

ECDSA P-256 with SHA-256 is FIPS 140-approved and quick to generate, so the
same PKI serves both profiles. It is made here, in memory: each end's caller writes the CA, its
own certificate and its own key (a key only where it is used) to its node (`Pki.install`), into
the tunnel's folder there, mode 0600, removed with the tunnel.

Made in-process with `cryptography` rather than with five `openssl` commands: under the VM's
software emulation those took 3 s of every repetition (a fresh tunnel each).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from typing import Callable, Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..tools import Tool

OPENSSL = Tool("openssl", "openssl", ("openssl", "version"))

VALID = datetime.timedelta(days=2)
CLOCK_SLACK = datetime.timedelta(minutes=5)  # a guest's clock may trail the host's a little


End = Literal["server", "client"]


@dataclass(frozen=True)
class Installed:
    """Where one end's files are on its node."""

    ca: str
    cert: str
    key: str


@dataclass(frozen=True)
class Pki:
    """The PEM bytes of a CA certificate and of each end's certificate and private key (PKCS#8)."""

    ca: bytes
    server_cert: bytes
    server_key: bytes
    client_cert: bytes
    client_key: bytes

    def own(self, end: End) -> tuple[bytes, bytes]:
        """This end's certificate and key."""
        return (self.server_cert, self.server_key) if end == "server" else (self.client_cert, self.client_key)

    def install(self, end: End, write: Callable[[str, bytes], str]) -> Installed:
        """Write what `end` needs, the CA and its own certificate and key (never the other end's key),
        with `write(name, content) -> path` (a driver's `lambda n, c: env.write(node, n, c)`)."""
        cert, key = self.own(end)
        return Installed(write("ca.pem", self.ca), write(f"{end}.pem", cert), write(f"{end}.key", key))


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


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_pki(server_ip: str) -> Pki:
    """CA + server cert (with the server's IP as subject alternative name) + client cert, each with its key."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("vpnlab test CA", ca_key, "vpnlab test CA", ca_key, [
        (x509.BasicConstraints(ca=True, path_length=None), True),
        (_usage(key_cert_sign=True, crl_sign=True), True)])
    pems = {"ca": ca.public_bytes(serialization.Encoding.PEM)}
    for role, purpose in (("server", ExtendedKeyUsageOID.SERVER_AUTH), ("client", ExtendedKeyUsageOID.CLIENT_AUTH)):
        key = ec.generate_private_key(ec.SECP256R1())
        extensions = [(x509.BasicConstraints(ca=False, path_length=None), False),
                      (_usage(digital_signature=True, key_agreement=True), True),
                      (x509.ExtendedKeyUsage([purpose]), False)]
        if role == "server":
            extensions.append((x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(server_ip))]), False))
        cert = _certificate(f"vpnlab-{role}", key, "vpnlab test CA", ca_key, extensions)
        pems[f"{role}_key"] = _key_pem(key)
        pems[f"{role}_cert"] = cert.public_bytes(serialization.Encoding.PEM)
    return Pki(**pems)
