"""What a VPN configuration's cryptography is, per channel, in one vocabulary.

Each driver declares, for its options and profile, the algorithms of its control channel (protocol,
key exchange, authentication, cipher) and of its data channel (protocol, cipher, integrity):
`Driver.algorithms`. Once a tunnel is up, every repetition reads what it negotiated
(`Driver.negotiated`): each driver parses its own daemons' logs in its module (OpenVPN's "Control
Channel:" and "Data Channel:" lines, charon's "selected proposal", pluto's established SAs,
openconnect's ciphersuites, pppd's MPPE line; WireGuard negotiates nothing), with the helpers here
(names to one vocabulary, the kernel's ESP states from `ip xfrm state`, reading a tunnel's logs).
algorithm_report.py stores both with the repetition and builds the report's table from them. A
profile restricts algorithms: it does not swap the crypto library for a FIPS-validated module, as
some seeds did.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from .core.errors import VpnlabError
from .core.flags import declare

TOOL = "algorithms"  # the raw output each repetition stores them under

CONTROL = ("control", "key_exchange", "authentication", "control_cipher")
DATA = ("data", "data_cipher", "data_integrity")
HEADINGS = {"control": "control channel", "key_exchange": "key exchange", "authentication": "authentication",
            "control_cipher": "control cipher", "data": "data channel", "data_cipher": "data cipher",
            "data_integrity": "data integrity"}
AEAD = "AEAD"  # the cipher authenticates (GCM, Poly1305): no separate integrity algorithm

# Not FIPS 140-approved (a fips profile must not run them): Curve25519/X25519 and ChaCha20-Poly1305 are
# not approved for key agreement and encryption, Blowfish, RC4, MD5, MD4 never were, three-key TDEA is
# disallowed for encryption since 2024 (SP 800-131A r2).
NOT_FIPS = ("X25519", "ChaCha20", "BF-", "RC4", "MD5", "MS-CHAP", "3DES", "MODP-1024", "BLAKE2s", "Noise")
# Broken or deprecated whatever the profile: a reader choosing by speed must see it beside the result.
WEAK = {
    "3DES": "64-bit block, open to Sweet32; NIST disallows it for encryption since 2024",
    "BF-": "64-bit block, open to Sweet32",
    "RC4": "biased keystream; RFC 7465 prohibits it in TLS",
    "MD5": "collisions; RFC 6151 advises against it in new protocols",
    "MS-CHAP": "MS-CHAPv2 falls to one DES key search (and with it, in PPTP, the MPPE keys derived from it)",
    "MODP-1024": "a 1024-bit group, within reach of a state's precomputation (Logjam)",
}


def weak(text: str) -> list[str]:
    """Why each broken or deprecated algorithm named in `text` is one."""
    return [f"{name.rstrip('-')}: {why}" for name, why in WEAK.items() if name in text]


@dataclass(frozen=True)
class Algorithms:
    """The algorithms of one tunnel layer; a field left empty is unknown (or not read)."""

    control: str = ""         # "TLS 1.3", "IKEv2", "Noise_IKpsk2", "PPTP (TCP 1723)"
    key_exchange: str = ""    # "X25519", "ECDH P-256", "MODP-2048"
    authentication: str = ""  # "ECDSA P-256 SHA-256", "PSK", "MS-CHAPv2"
    control_cipher: str = ""  # "AES-256-GCM", "AES-128-CBC HMAC-SHA256-128"
    data: str = ""            # "ESP", "ESP in UDP", "DTLS 1.2", "OpenVPN UDP"
    data_cipher: str = ""     # "AES-256-GCM", "3DES-CBC", "RC4-128 (MPPE stateless)"
    data_integrity: str = ""  # "AEAD", "HMAC-SHA256", "HMAC-SHA1-96", "none"
    source: str = ""          # where the values were read (negotiated) or what declared them

    def values(self) -> dict[str, str]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "source" and getattr(self, f.name)}

    def as_dict(self) -> dict[str, str]:
        return {k: v for k, v in asdict(self).items() if v}

    @classmethod
    def from_dict(cls, data: dict | None) -> "Algorithms | None":
        if data is None:
            return None
        return cls(**{k: v for k, v in data.items() if k in HEADINGS or k == "source"})

    def __or__(self, other: "Algorithms") -> "Algorithms":
        """These values, completed by `other`'s where these are empty."""
        return Algorithms(**{f.name: getattr(self, f.name) or getattr(other, f.name) for f in fields(self)})


def merged(*found: "Algorithms | None") -> "Algorithms | None":
    """Several readings of one tunnel, the first one's values first (the kernel's state before a log)."""
    present = [f for f in found if f]
    if not present:
        return None
    out = present[0]
    for more in present[1:]:
        out = out | more
    return Algorithms(**{**out.as_dict(), "source": " + ".join(f.source for f in present if f.source)})


ALGORITHMS_DIFFER = declare("algorithms-differ", "the live tunnel negotiated other algorithms than its driver declares")


def mismatches(declared: Algorithms | None, negotiated: Algorithms | None) -> list[str]:
    """'key exchange: declared ECDH P-256, negotiated X25519' for each field both know and differ in."""
    if declared is None or negotiated is None:
        return []
    mine, theirs = declared.values(), negotiated.values()
    return [f"{HEADINGS[k]}: declared {mine[k]}, negotiated {theirs[k]}" for k in HEADINGS
            if k in mine and k in theirs and mine[k] != theirs[k]]


def fips_approved(name: str) -> bool:
    """Does FIPS 140 approve the algorithms `name` names (in this module's vocabulary)? The one FIPS
    rule: each driver's fips profile takes its allowed options from it."""
    return not any(bad in name for bad in NOT_FIPS)


# --- names, as the software prints them, to one vocabulary ----------------------------------------

_GROUPS = {"CURVE_25519": "X25519", "X25519": "X25519", "CURVE_448": "X448", "X448": "X448",
           "ECP_256": "ECDH P-256", "ECP_384": "ECDH P-384", "ECP_521": "ECDH P-521",
           "PRIME256V1": "ECDH P-256", "SECP256R1": "ECDH P-256", "P-256": "ECDH P-256",
           "SECP384R1": "ECDH P-384", "P-384": "ECDH P-384", "SECP521R1": "ECDH P-521",
           "DH19": "ECDH P-256", "DH20": "ECDH P-384", "DH21": "ECDH P-521", "DH31": "X25519",
           "DH14": "MODP-2048", "DH15": "MODP-3072", "DH2": "MODP-1024", "DH5": "MODP-1536"}


def group_name(name: str) -> str:
    """A key-exchange group as one vocabulary: 'ECDH P-256', 'X25519', 'MODP-2048'."""
    key = name.strip().upper()
    if key.startswith("EC") and key[2:] in _GROUPS:  # OpenVPN: 'ECprime256v1'
        key = key[2:]
    if key in _GROUPS:
        return _GROUPS[key]
    modp = re.fullmatch(r"MODP_?(\d+)", key)
    return f"MODP-{modp.group(1)}" if modp else name.strip()


def cipher_name(name: str) -> str:
    """A cipher as one vocabulary: 'AES-128-GCM', 'AES-256-CBC', '3DES-CBC', 'ChaCha20-Poly1305'."""
    key = name.strip().upper().replace("_", "-")
    if "CHACHA20" in key:
        return "ChaCha20-Poly1305"
    m = re.fullmatch(r"AES-GCM-(?:16-)?(\d+)", key) or re.fullmatch(r"AES-(\d+)-GCM", key)
    if m:
        return f"AES-{m.group(1)}-GCM"
    m = re.fullmatch(r"AES-CBC-(\d+)", key) or re.fullmatch(r"AES-(\d+)-CBC", key) or re.fullmatch(r"AES(\d+)", key)
    if m:
        return f"AES-{m.group(1)}-CBC"
    if key in ("3DES-CBC", "3DES", "DES-EDE3-CBC", "3DES-CBC-192"):
        return "3DES-CBC"
    if key in ("BF-CBC", "BLOWFISH-CBC"):
        return "BF-CBC"
    return name.strip()


def integrity_name(name: str) -> str:
    """An integrity algorithm: 'HMAC-SHA256-128' (truncated to 128 bits, as ESP and IKE do),
    'HMAC-SHA1-96', 'HMAC-SHA256' (OpenVPN's, untruncated)."""
    key = name.strip().upper().replace("_", "-")
    m = re.fullmatch(r"HMAC-SHA2-(\d+)(?:-(\d+))?", key)
    if m:
        return f"HMAC-SHA{m.group(1)}" + (f"-{m.group(2)}" if m.group(2) else "")
    m = re.fullmatch(r"HMAC-(SHA1|MD5)(?:-(\d+))?", key)
    if m:
        return f"HMAC-{m.group(1)}" + (f"-{m.group(2)}" if m.group(2) else "")
    if key in ("SHA1", "SHA256", "SHA384", "SHA512", "MD5"):
        return f"HMAC-{key}"
    return name.strip()


def cipher_and_integrity(transforms: list[str]) -> tuple[str, str]:
    """strongSwan's or libreswan's transforms (AES_GCM_16_256, HMAC_SHA2_256_128, ...): cipher, integrity."""
    cipher = next((cipher_name(t) for t in transforms if not t.upper().startswith(("HMAC", "PRF", "NO_EXT",
                                                                                    "EXT_SEQ", "AUTH"))), "")
    integrity = next((integrity_name(t) for t in transforms if t.upper().startswith(("HMAC", "AUTH_HMAC"))), "")
    aead = "GCM" in cipher or "Poly1305" in cipher
    return cipher, (AEAD if aead else integrity)


# --- the kernel's ESP state (each driver parses its own daemons' logs: real output in tests/data/algorithms)

def parse_xfrm_state(text: str) -> Algorithms | None:
    """The kernel's ESP states (`ip xfrm state`): 'aead rfc4106(gcm(aes)) 0x... 128', 'enc cbc(aes) 0x...',
    'auth-trunc hmac(sha256) 0x... 128', 'encap type espinudp ...', an IPComp state ('proto comp ...
    comp deflate'). The first ESP state is read."""
    blocks = re.split(r"\n(?=src )", text.strip())
    ipcomp = any("proto comp" in block and "deflate" in block for block in blocks)
    for block in blocks:
        if "proto esp" not in block:
            continue
        values = {"data": ("ESP in UDP" if "encap type espinudp" in block else "ESP")
                  + (" + IPComp (DEFLATE)" if ipcomp else "")}
        aead = re.search(r"aead (\S+) 0x([0-9a-f]+) (\d+)", block)
        enc = re.search(r"enc (\S+) 0x([0-9a-f]+)", block)
        auth = re.search(r"auth(?:-trunc)? (\S+) 0x[0-9a-f]+(?: (\d+))?", block)
        if aead:
            algo, key, _icv = aead.groups()
            if "chacha" in algo:
                values["data_cipher"] = "ChaCha20-Poly1305"
            else:  # rfc4106: the key carries a 4-byte salt
                values["data_cipher"] = f"AES-{(len(key) // 2 - 4) * 8}-GCM"
            values["data_integrity"] = AEAD
        elif enc:
            algo, key = enc.groups()
            bits = len(key) * 4
            values["data_cipher"] = ("3DES-CBC" if "des3" in algo else f"AES-{bits}-CBC" if "aes" in algo
                                     else "none" if "null" in algo else algo)
            if auth:
                name, trunc = auth.groups()
                digest = re.search(r"hmac\((\w+)\)", name)
                values["data_integrity"] = (integrity_name(digest.group(1)) if digest else name) + (
                    f"-{trunc}" if trunc else "")
        return Algorithms(**values, source="ip xfrm state")
    return None


# --- reading a live tunnel --------------------------------------------------------------------------

def logs_of(tunnel, word: str) -> list[Path]:
    """The tunnel's daemon logs whose name holds `word`, the client's (started last) first."""
    return [log for _, _, log in reversed(tunnel.processes) if word in log.name]


def read_logs(tunnel, word: str, parser) -> Algorithms | None:
    """The first of the tunnel's `word` logs the parser reads something from (Tunnel.read_log)."""
    for log in logs_of(tunnel, word):
        found = parser(tunnel.read_log(log))
        if found:
            return found
    return None


def read_xfrm(tunnel) -> Algorithms | None:
    """The kernel's ESP state in the namespace of the tunnel's client daemon (kernel ESP only); kept
    beside the daemons' logs, its keys blanked, as the evidence of what was read."""
    if not tunnel.processes:
        return None
    node = tunnel.processes[-1][0]
    try:
        out = node.run(["ip", "xfrm", "state"], check=False, timeout=10).stdout
    except (VpnlabError, subprocess.SubprocessError, OSError):
        return None
    try:
        tunnel.env.log("xfrm-state").write_text(blank_keys(out))
    except (AttributeError, OSError):
        pass
    return parse_xfrm_state(out)


def blank_keys(text: str) -> str:
    """`ip xfrm state` with every key replaced by zeros of its length (SPIs, 8 hex digits, kept)."""
    return re.sub(r"0x([0-9a-f]{16,})", lambda m: "0x" + "0" * len(m.group(1)), text)
