"""The per-tunnel PKI (drivers/pki.py): made in memory, each end given only its own key."""

import ipaddress
import subprocess
import time

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from vpnlab.drivers.pki import CLOCK_SLACK, make_pki


def public(pem: bytes) -> bytes:
    key = serialization.load_pem_private_key(pem, None)
    return key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def test_both_certificates_chain_to_the_ca_and_carry_their_own_keys():
    pki = make_pki("198.18.0.2")
    ca = x509.load_pem_x509_certificate(pki.ca)
    ca.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for end, purpose in (("server", ExtendedKeyUsageOID.SERVER_AUTH), ("client", ExtendedKeyUsageOID.CLIENT_AUTH)):
        cert_pem, key_pem = pki.own(end)
        cert = x509.load_pem_x509_certificate(cert_pem)
        cert.verify_directly_issued_by(ca)
        assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [purpose]
        assert cert.public_key().public_bytes(serialization.Encoding.DER,
                                              serialization.PublicFormat.SubjectPublicKeyInfo) == public(key_pem)
    server = x509.load_pem_x509_certificate(pki.server_cert)
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("198.18.0.2")]
    assert public(pki.server_key) != public(pki.client_key)
    assert make_pki("198.18.0.2").ca != pki.ca  # a fresh CA each time


def test_an_end_is_given_the_ca_and_its_own_certificate_and_key_only():
    pki = make_pki("198.18.0.2")
    for end in ("server", "client"):
        written = {}

        def write(name: str, content: bytes) -> str:  # as env.write: the file's path on the node
            written[f"/node/{name}"] = content
            return f"/node/{name}"

        installed = pki.install(end, write)
        assert (installed.ca, installed.cert, installed.key) == ("/node/ca.pem", f"/node/{end}.pem", f"/node/{end}.key")
        assert written == {"/node/ca.pem": pki.ca, f"/node/{end}.pem": pki.own(end)[0], f"/node/{end}.key": pki.own(end)[1]}
        other = "client" if end == "server" else "server"
        assert pki.own(other)[1] not in written.values()


def test_a_client_whose_clock_trails_by_minutes_accepts_the_server_certificate(tmp_path):
    """A real host's clock may trail the controller's (or a server's): openssl, as curl and the VPN
    clients check, accepts the chain at a time a few minutes before it was made, not at one beyond
    the slack."""
    pki = make_pki("198.18.0.2")
    (tmp_path / "ca.pem").write_bytes(pki.ca)
    (tmp_path / "server.pem").write_bytes(pki.server_cert)

    def verify_at(seconds_ago: float) -> int:
        return subprocess.run(["openssl", "verify", "-attime", str(int(time.time() - seconds_ago)), "-CAfile",
                               tmp_path / "ca.pem", tmp_path / "server.pem"], capture_output=True).returncode

    slack = CLOCK_SLACK.total_seconds()
    assert verify_at(slack - 60) == 0
    assert verify_at(slack + 60) != 0  # the check is real: earlier than the slack, not yet valid
