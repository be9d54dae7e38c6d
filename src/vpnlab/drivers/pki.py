"""A throw-away PKI per tunnel: a CA, a server and a client certificate (openssl CLI).

ECDSA P-256 with SHA-256 is FIPS 140-approved and quick to generate, so the
same PKI serves both profiles. Everything lands in the run's secrets directory,
mode 0600, and is removed with the run.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import CommandError
from ..tools import Tool

OPENSSL = Tool("openssl", "openssl", ("openssl", "version"))

DAYS = "2"
CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                          preexec_fn=lambda: os.umask(0o077))
    if proc.returncode != 0:
        raise CommandError(["openssl", *args], proc.returncode, proc.stdout, proc.stderr)


def make_pki(folder: Path, server_ip: str, prefix: str) -> Pki:
    """CA + server cert (with the server's IP as subject alternative name) + client cert."""
    folder.mkdir(mode=0o700, exist_ok=True)
    p = lambda name: folder / f"{prefix}{name}"  # noqa: E731 - short local path helper
    _openssl("req", "-x509", *CURVE, "-nodes", "-keyout", str(p("ca.key")), "-out", str(p("ca.pem")),
             "-days", DAYS, "-subj", "/CN=vpnlab test CA",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=folder)
    for role, usage in (("server", "serverAuth"), ("client", "clientAuth")):
        ext = p(f"{role}.ext")
        san = f"subjectAltName=IP:{server_ip}\n" if role == "server" else ""
        ext.write_text(f"basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyAgreement\n"
                       f"extendedKeyUsage={usage}\n{san}")
        _openssl("req", *CURVE, "-nodes", "-keyout", str(p(f"{role}.key")), "-out", str(p(f"{role}.csr")),
                 "-subj", f"/CN=vpnlab-{role}", cwd=folder)
        _openssl("x509", "-req", "-in", str(p(f"{role}.csr")), "-CA", str(p("ca.pem")), "-CAkey", str(p("ca.key")),
                 "-CAcreateserial", "-out", str(p(f"{role}.pem")), "-days", DAYS, "-sha256", "-extfile", str(ext),
                 cwd=folder)
    return Pki(p("ca.pem"), p("server.pem"), p("server.key"), p("client.pem"), p("client.key"))
